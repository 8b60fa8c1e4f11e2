"""In-flight versus cap with queue depth (SPEC §4 concurrency, §6 run page).

In-flight and queue depth are per-minute summaries of the 1-second series analytics
computes from span intervals: the mean as a line, the max as a thinner line. The cap is the
run's total concurrency cap per minute (sum over active shards) when shards declared one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go

from dashboard.data.minute_series import MinuteSeries
from dashboard.display import NOT_MEASURED, fmt_rate
from dashboard.figures.chart_style import (
    CAP_COLOR,
    add_note,
    base_layout,
    message_figure,
    time_axis,
)

CONCURRENCY_COLUMNS = (
    "in_flight_mean",
    "in_flight_max",
    "queue_depth_mean",
    "queue_depth_max",
    "concurrency_cap",
)


def work_conserving_text(metrics: Mapping[str, Any]) -> str:
    """One line on the work-conserving check (sag share among seconds with a queue)."""
    check = metrics.get("work_conserving") or {}
    if check.get("sag_share") is None:
        return f"Work-conserving check: {NOT_MEASURED} (no queue wait reported)."
    verdict = "passes" if check.get("passes") else "fails"
    threshold = check.get("threshold")
    limit = f" (limit {fmt_rate(threshold)})" if threshold is not None else ""
    return (
        f"Work-conserving check {verdict}: in-flight below 90 % of cap in "
        f"{fmt_rate(check['sag_share'])} of {check.get('seconds_with_queue', 0):,} "
        f"seconds with a queue{limit}."
    )


def concurrency_figure(run: MinuteSeries) -> go.Figure:
    """In-flight mean/max, the cap, and queue depth mean/max on one time axis."""
    if not run.measured("in_flight_mean"):
        return message_figure(f"In-flight: {NOT_MEASURED}")
    data: list[Any] = [
        go.Scatter(
            x=run.minutes,
            y=run.column("in_flight_mean"),
            name="in-flight (mean)",
            mode="lines",
            line={"width": 2, "color": "#4C78A8"},
        ),
        go.Scatter(
            x=run.minutes,
            y=run.column("in_flight_max"),
            name="in-flight (max)",
            mode="lines",
            line={"width": 1, "color": "#4C78A8", "dash": "dot"},
        ),
    ]
    if run.measured("concurrency_cap"):
        data.append(
            go.Scatter(
                x=run.minutes,
                y=run.column("concurrency_cap"),
                name="cap",
                mode="lines",
                line={"width": 2, "color": CAP_COLOR, "shape": "hv", "dash": "dash"},
            )
        )
    if run.measured("queue_depth_mean"):
        data.append(
            go.Scatter(
                x=run.minutes,
                y=run.column("queue_depth_mean"),
                name="queue depth (mean)",
                mode="lines",
                fill="tozeroy",
                line={"width": 1, "color": "#B279A2"},
            )
        )
        data.append(
            go.Scatter(
                x=run.minutes,
                y=run.column("queue_depth_max"),
                name="queue depth (max)",
                mode="lines",
                line={"width": 1, "color": "#B279A2", "dash": "dot"},
            )
        )
    layout = base_layout(
        height=340, xaxis=time_axis(), yaxis={"title": {"text": "requests"}, "rangemode": "tozero"}
    )
    figure = go.Figure(data=data, layout=layout)
    if not run.measured("queue_depth_mean"):
        add_note(figure, f"queue depth: {NOT_MEASURED}")
    return figure
