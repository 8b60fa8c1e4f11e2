"""Throughput versus stability (SPEC §6): stacked TPM per shard, rates on a second axis.

Bars are one token type (prompt, completion or total) stacked by shard on a UTC minute
axis; the run's retry rate and success rate per minute share the time axis on a second
y axis (0–100 %); the peak minute of the snapshot is marked with its value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go

from dashboard.data.minute_series import MinuteSeries
from dashboard.display import NOT_MEASURED, TOKEN_COLUMNS, TOKEN_LABELS, fmt_int, plot_minute
from dashboard.figures.chart_style import (
    PEAK_COLOR,
    RETRY_COLOR,
    SHARD_COLORS,
    SUCCESS_COLOR,
    add_note,
    base_layout,
    message_figure,
    rate_axis,
    time_axis,
)


def peak_for(token_type: str, metrics: Mapping[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """Which sealed peak minute to mark for a token type, and how to name it.

    SPEC §4 defines two peaks: by ``tpm_total`` and by ``completion_tpm_out``. The prompt
    view marks the total peak and reports the prompt tokens of that minute.
    """
    if token_type == "completion":
        return "peak completion minute", metrics.get("peak_completion_minute")
    return "peak total minute", metrics.get("peak_minute")


def _rate_traces(run: MinuteSeries) -> tuple[list[go.Scatter], list[str]]:
    traces: list[go.Scatter] = []
    missing: list[str] = []
    for column, name, color, dash in (
        ("success_rate", "success rate", SUCCESS_COLOR, "solid"),
        ("retry_rate", "retry rate", RETRY_COLOR, "dot"),
    ):
        if not run.measured(column):
            missing.append(f"{name}: {NOT_MEASURED}")
            continue
        traces.append(
            go.Scatter(
                x=run.minutes,
                y=run.column(column),
                name=name,
                yaxis="y2",
                mode="lines",
                line={"color": color, "dash": dash, "width": 2},
                hovertemplate="%{y:.1%}",
                connectgaps=False,
            )
        )
    return traces, missing


def throughput_figure(
    shards: Mapping[str, MinuteSeries],
    run: MinuteSeries,
    token_type: str,
    metrics: Mapping[str, Any],
) -> go.Figure:
    """The chart for ``token_type`` ("prompt", "completion" or "total")."""
    column = TOKEN_COLUMNS[token_type]
    if not shards:
        return message_figure("No minutes sealed for this run yet.")
    data: list[Any] = []
    for i, (shard_id, series) in enumerate(shards.items()):
        data.append(
            go.Bar(
                x=series.minutes,
                y=series.column(column),
                name=f"shard {shard_id}",
                marker={"color": SHARD_COLORS[i % len(SHARD_COLORS)], "line": {"width": 0}},
                hovertemplate="%{y:,}",
            )
        )
    rate_traces, missing = _rate_traces(run)
    data.extend(rate_traces)
    layout = base_layout(
        height=460,
        # The peak label sits above the plot, so the legend goes below the axis title.
        margin={"l": 64, "r": 64, "t": 40, "b": 130},
        legend={"orientation": "h", "y": -0.3, "yanchor": "top", "x": 0},
        barmode="stack",
        bargap=0.05,
        xaxis=time_axis(),
        yaxis={"title": {"text": TOKEN_LABELS[token_type]}, "rangemode": "tozero"},
        yaxis2=rate_axis("success / retry rate"),
    )
    figure = go.Figure(data=data, layout=layout)
    _mark_peak(figure, token_type, metrics)
    if missing:
        add_note(figure, "; ".join(missing))
    return figure


def _mark_peak(figure: go.Figure, token_type: str, metrics: Mapping[str, Any]) -> None:
    label, peak = peak_for(token_type, metrics)
    if not peak or not peak.get("minute_utc"):
        return
    x = plot_minute(peak["minute_utc"])
    value = peak.get(TOKEN_COLUMNS[token_type])
    figure.add_shape(
        type="line",
        x0=x,
        x1=x,
        xref="x",
        y0=0,
        y1=1,
        yref="paper",
        line={"color": PEAK_COLOR, "width": 2, "dash": "dash"},
    )
    figure.add_annotation(
        name="peak",
        x=x,
        y=1,
        xref="x",
        yref="paper",
        yanchor="bottom",
        showarrow=False,
        font={"color": PEAK_COLOR},
        text=f"{label} {x} UTC: {fmt_int(value)} {token_type} TPM",
    )
