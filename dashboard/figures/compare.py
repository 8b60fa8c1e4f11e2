"""Compare: two runs' TPM and retry / stall rates on one time-aligned chart.

Both runs are drawn against minutes since their own first minute, so a baseline and a
candidate recorded on different days line up; rates share a second axis.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tpmledger.analytics.verdicts.compare_runs import RunMinutes
from tpmledger.dashboard.figures.chart_style import (
    Figure,
    add_in_progress_legend,
    base_layout,
    figure,
    message_figure,
    plot_text,
    rate_axis,
    split_open,
    value_axis,
)

RUN_COLORS = ("#4C78A8", "#F58518")


def _rate(top: Any, bottom: Any) -> list[float | None]:
    if top is None or bottom is None:
        return []
    return [
        None if b == 0 or np.isnan(t) else float(t / b) for t, b in zip(top, bottom, strict=True)
    ]


def compare_figure(a: RunMinutes, b: RunMinutes) -> Figure:
    """TPM (total) of A and B per minute since each run's start; retry and stall rates."""
    if not a.minute_utc or not b.minute_utc:
        return message_figure("A run has no sealed minutes.")
    data: list[dict[str, Any]] = []
    for run, label, color in ((a, "A", RUN_COLORS[0]), (b, "B", RUN_COLORS[1])):
        x = list(range(len(run.minute_utc)))
        name = f"{label} {plot_text(run.run_id)}"
        tpm = run.columns["tpm_total"]
        is_open = run.open_at_seal or [False] * len(x)
        data += split_open(
            {
                "type": "scatter",
                "x": x,
                "y": [] if tpm is None else [float(v) for v in tpm],
                "name": f"{name}: TPM (total)",
                "mode": "lines+markers",
                "line": {"color": color, "width": 2},
                "hovertemplate": "%{y:,.0f}",
            },
            is_open,
        )
        calls = run.columns["calls_in_minute"]
        for column, what, dash in (
            ("retries", "retry rate", "dot"),
            ("stalls", "stall rate", "dash"),
        ):
            values = _rate(run.columns.get(column), calls)
            if values:
                data += split_open(
                    {
                        "type": "scatter",
                        "x": x,
                        "y": values,
                        "name": f"{name}: {what}",
                        "yaxis": "y2",
                        "mode": "lines",
                        "line": {"color": color, "dash": dash, "width": 1.5},
                        "hovertemplate": "%{y:.1%}",
                    },
                    is_open,
                )
    layout = base_layout(
        height=440,
        margin={"l": 64, "r": 64, "t": 30, "b": 130},
        legend={"orientation": "h", "y": -0.22, "yanchor": "top", "x": 0},
        xaxis={"title": {"text": "minutes since the run's first minute"}, "dtick": 1},
        yaxis=value_axis("TPM (total: prompt + completion)"),
        yaxis2=rate_axis("retry / stall rate"),
    )
    fig = figure(data, layout)
    if any(a.open_at_seal) or any(b.open_at_seal):
        add_in_progress_legend(fig)
    return fig
