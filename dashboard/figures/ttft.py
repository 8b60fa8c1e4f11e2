"""Time to first token per minute: p50, p95 and p99 of successful attempts (docs/metrics.md)."""

from __future__ import annotations

from tpmledger.dashboard.data.minute_series import MinuteSeries
from tpmledger.dashboard.display import NOT_MEASURED
from tpmledger.dashboard.figures.chart_style import (
    MINUTE_PERIOD,
    Figure,
    add_in_progress,
    base_layout,
    figure,
    line_mode,
    message_figure,
    open_positions,
    split_open,
    time_axis,
    value_axis,
)

TTFT_COLUMNS = ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s")
_STYLES = {
    "ttft_p50_s": ("p50", "#54A24B", "solid"),
    "ttft_p95_s": ("p95", "#F58518", "solid"),
    "ttft_p99_s": ("p99", "#E45756", "dot"),
}


def ttft_figure(run: MinuteSeries) -> Figure:
    """Three percentile lines; minutes without TTFT leave gaps rather than zeros."""
    if not any(run.measured(c) for c in TTFT_COLUMNS):
        return message_figure(f"TTFT: {NOT_MEASURED} (no span of this run reports it)")
    data = []
    is_open = open_positions(run.states, len(run.minutes))
    for column in TTFT_COLUMNS:
        name, color, dash = _STYLES[column]
        data += split_open(
            {
                "type": "scatter",
                "x": run.minutes,
                "y": run.column(column),
                "name": f"TTFT {name}",
                "mode": line_mode(run.minutes),
                "line": {"color": color, "dash": dash, "width": 2},
                "connectgaps": False,
                "hovertemplate": "%{y:.3f} s",
                **MINUTE_PERIOD,
            },
            is_open,
        )
    layout = base_layout(
        height=320,
        xaxis=time_axis(minutes=run.minutes),
        yaxis=value_axis("time to first token (s)"),
    )
    fig = figure(data, layout)
    add_in_progress(fig, run.minutes, is_open)
    return fig
