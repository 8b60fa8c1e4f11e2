"""In-flight versus cap with queue depth (docs/metrics.md concurrency, docs/dashboard.md run page).

In-flight and queue depth are per-minute summaries of the 1-second series analytics
computes from span intervals: the mean as a line, the max as a dotted line. The cap is the
run's total concurrency cap per minute (sum over active shards) when shards declared one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpmledger.dashboard.data.minute_series import MinuteSeries
from tpmledger.dashboard.display import NOT_MEASURED, fmt_rate
from tpmledger.dashboard.figures.chart_style import (
    CAP_COLOR,
    MINUTE_PERIOD,
    Figure,
    add_in_progress,
    add_note,
    base_layout,
    figure,
    line_mode,
    message_figure,
    open_positions,
    split_open,
    time_axis,
    value_axis,
)

CONCURRENCY_COLUMNS = (
    "in_flight_mean",
    "in_flight_max",
    "queue_depth_mean",
    "queue_depth_max",
    "concurrency_cap",
)
IN_FLIGHT_COLOR = "#4C78A8"
QUEUE_COLOR = "#B279A2"


def work_conserving_text(metrics: Mapping[str, Any], *, live_since_seal: bool = False) -> str:
    """One line on the work-conserving check (sag share among seconds with a queue).

    ``live_since_seal``: the run received data after a version was sealed; the live figures
    then cannot state the check (sealed versions keep no per-second counts), whatever the
    queue data, so the line says it waits for the next seal instead of blaming the data.
    """
    check = metrics.get("work_conserving") or {}
    if check.get("sag_share") is None:
        if live_since_seal:
            return (
                f"Work-conserving check: {NOT_MEASURED} yet (while the run is live after a "
                "sealed version; stated once it is sealed again)."
            )
        return f"Work-conserving check: {NOT_MEASURED} (no queue wait reported)."
    verdict = "passes" if check.get("passes") else "fails"
    threshold = check.get("threshold")
    limit = f" (limit {fmt_rate(threshold)})" if threshold is not None else ""
    below = check.get("sag_below_fraction_of_cap", 0.9)
    return (
        f"Work-conserving check {verdict}: in-flight below {below * 100:.0f} % of cap in "
        f"{fmt_rate(check['sag_share'])} of {check.get('seconds_with_queue', 0):,} "
        f"seconds with a queue{limit}."
    )


def _line(run: MinuteSeries, column: str, name: str, color: str, **style: Any) -> dict[str, Any]:
    return {
        "type": "scatter",
        "x": run.minutes,
        "y": run.column(column),
        "name": name,
        "mode": line_mode(run.minutes),
        "line": {"color": color, "width": style.pop("width", 2), **style},
        **MINUTE_PERIOD,
    }


def concurrency_figure(run: MinuteSeries) -> Figure:
    """In-flight mean/max, the cap, and queue depth mean/max on one time axis."""
    if not run.measured("in_flight_mean"):
        return message_figure(f"In-flight: {NOT_MEASURED}")
    data = []
    # The cap first, wide and translucent, so the in-flight lines are drawn over it: a
    # cap-bound run's max sits exactly on the cap and would otherwise vanish under it.
    if run.measured("concurrency_cap"):
        cap = _line(run, "concurrency_cap", "cap", CAP_COLOR, width=5, dash="dash", shape="hv")
        data.append({**cap, "opacity": 0.45})
    data += [
        _line(run, "in_flight_mean", "in-flight (mean)", IN_FLIGHT_COLOR),
        _line(run, "in_flight_max", "in-flight (max)", IN_FLIGHT_COLOR, width=2, dash="dot"),
    ]
    queue_measured = run.measured("queue_depth_mean")
    if queue_measured:
        mean = _line(run, "queue_depth_mean", "queue depth (mean)", QUEUE_COLOR, width=1)
        data.append({**mean, "fill": "tozeroy"})
        data.append(
            _line(run, "queue_depth_max", "queue depth (max)", QUEUE_COLOR, width=1, dash="dot")
        )
    layout = base_layout(
        height=340, xaxis=time_axis(minutes=run.minutes), yaxis=value_axis("requests")
    )
    is_open = open_positions(run.states, len(run.minutes))
    data = [part for trace in data for part in split_open(trace, is_open)]
    fig = figure(data, layout)
    add_in_progress(fig, run.minutes, is_open)
    if not queue_measured:
        add_note(fig, f"queue depth: {NOT_MEASURED}")
    return fig
