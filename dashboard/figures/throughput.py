"""Throughput versus stability (docs/dashboard.md): stacked TPM per shard, rates on a second axis.

Bars are one token type (prompt, completion or total) stacked by shard on a UTC minute
axis; the run's retry rate and success rate per minute share the time axis on a second
y axis (0–100 %); the peak minute of the snapshot is marked with its value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpmledger.dashboard.data.minute_series import MinuteSeries
from tpmledger.dashboard.display import (
    NOT_MEASURED,
    TOKEN_COLUMNS,
    TOKEN_LABELS,
    fmt_int,
    plot_minute,
)
from tpmledger.dashboard.figures.chart_style import (
    MINUTE_PERIOD,
    RETRY_COLOR,
    SHARD_COLORS,
    SUCCESS_COLOR,
    Figure,
    add_in_progress,
    add_marker,
    add_note,
    base_layout,
    figure,
    line_mode,
    message_figure,
    minute_middle,
    open_positions,
    plot_text,
    rate_axis,
    split_open,
    time_axis,
    value_axis,
)


def peak_for(token_type: str, metrics: Mapping[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """Which sealed peak minute to mark for a token type, and how to name it.

    docs/metrics.md defines two peaks: by ``tpm_total`` and by ``completion_tpm_out``. The prompt
    view marks the total peak and reports the prompt tokens of that minute.
    """
    if token_type == "completion":
        return "peak completion minute", metrics.get("peak_completion_minute")
    return "peak total minute", metrics.get("peak_minute")


def _rate_traces(run: MinuteSeries) -> tuple[list[dict[str, Any]], list[str]]:
    is_open = open_positions(run.states, len(run.minutes))
    traces: list[dict[str, Any]] = []
    missing: list[str] = []
    for column, name, color, dash in (
        ("success_rate", "success rate", SUCCESS_COLOR, "solid"),
        ("retry_rate", "retry rate", RETRY_COLOR, "dot"),
    ):
        if not run.measured(column):
            missing.append(f"{name}: {NOT_MEASURED}")
            continue
        traces += split_open(
            {
                "type": "scatter",
                "x": run.minutes,
                "y": run.column(column),
                "name": name,
                "yaxis": "y2",
                "mode": line_mode(run.minutes),
                "line": {"color": color, "dash": dash, "width": 2},
                "hovertemplate": "%{y:.1%}",
                "connectgaps": False,
                **MINUTE_PERIOD,
            },
            is_open,
        )
    return traces, missing


def throughput_figure(
    shards: Mapping[str, MinuteSeries],
    run: MinuteSeries,
    token_type: str,
    metrics: Mapping[str, Any],
) -> Figure:
    """The chart for ``token_type`` ("prompt", "completion" or "total")."""
    column = TOKEN_COLUMNS[token_type]
    if not shards:
        return message_figure("No minutes sealed for this run yet.")
    data: list[dict[str, Any]] = [
        trace
        for i, (shard_id, series) in enumerate(shards.items())
        for trace in split_open(_shard_bars(i, shard_id, series, column), _open(series))
    ]
    rate_traces, missing = _rate_traces(run)
    data.extend(rate_traces)
    layout = base_layout(
        height=460,
        # The peak label sits above the plot, so the legend goes below the axis title.
        margin={"l": 64, "r": 64, "t": 40, "b": 130},
        legend={"orientation": "h", "y": -0.3, "yanchor": "top", "x": 0},
        barmode="stack",
        bargap=0.05,
        xaxis=time_axis(minutes=run.minutes),
        yaxis=value_axis(TOKEN_LABELS[token_type]),
        yaxis2=rate_axis("success / retry rate"),
    )
    fig = figure(data, layout)
    add_in_progress(fig, run.minutes, open_positions(run.states, len(run.minutes)))
    label, peak = peak_for(token_type, metrics)
    if peak and peak.get("minute_utc"):
        x = plot_minute(peak["minute_utc"])
        value = fmt_int(peak.get(column))
        text = f"{label} {x} UTC: {value} {token_type} TPM"
        add_marker(fig, minute_middle(x), text, "peak")
    if missing:
        add_note(fig, "; ".join(missing))
    return fig


def _open(series: MinuteSeries) -> list[bool]:
    return open_positions(series.states, len(series.minutes))


def _shard_bars(i: int, shard_id: str, series: MinuteSeries, column: str) -> dict[str, Any]:
    return {
        "type": "bar",
        "x": series.minutes,
        "y": series.column(column),
        "name": f"shard {plot_text(shard_id)}",
        "marker": {"color": SHARD_COLORS[i % len(SHARD_COLORS)], "line": {"width": 0}},
        # A minute wide (in ms on the date axis), not whatever the gaps between bars are.
        "width": 57_000,
        "hovertemplate": "%{y:,}",
        **MINUTE_PERIOD,
    }
