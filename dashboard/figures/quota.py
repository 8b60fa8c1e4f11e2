"""Used versus quota per target (docs/metrics.md#quota-headroom, docs/dashboard.md run page).

One panel per measure: tokens used per minute against the tokens quota, requests against the
requests quota, one colour per target (provider/model). Used is drawn as bars, the quota
as a dashed step line; minutes with rate-limited attempts get a marker above their bar.
A target that reports no quota shows its use only, and the chart says so. Open minutes
(still filling, docs/dashboard.md#in-progress-minutes) are drawn in progress, as on the
run's other charts.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from tpmledger.dashboard.display import NOT_MEASURED
from tpmledger.dashboard.figures.chart_style import (
    MINUTE_PERIOD,
    RETRY_COLOR,
    SHARD_COLORS,
    Figure,
    add_in_progress,
    add_note,
    base_layout,
    figure,
    message_figure,
    plot_text,
    split_open,
    time_axis,
    value_axis,
)
from tpmledger.storage.target_minutes import TargetMinute
from tpmledger.storage.time_text import minute_text_ns


def _label(t: TargetMinute) -> str:
    return plot_text(f"{t.provider or '?'}/{t.model or '?'}")


def _x(rows: Sequence[TargetMinute]) -> list[str]:
    # The dashboard's minute strings: "YYYY-MM-DD HH:MM" (UTC).
    return [minute_text_ns(t.minute_ns)[:16].replace("T", " ") for t in rows]


def dashboard_minute(minute_utc: str) -> str:
    """``2026-11-26T14:39:00Z`` as the dashboard's minute text, ``2026-11-26 14:39``."""
    return minute_utc[:16].replace("T", " ")


def quota_figure(targets: Sequence[TargetMinute], open_minutes: Collection[str] = ()) -> Figure:
    """Tokens (top) and requests (bottom) used per minute versus each target's quota;
    ``open_minutes`` (dashboard minute text) are drawn in progress."""
    if not targets:
        return message_figure(f"Used versus quota: {NOT_MEASURED} (no attempts yet)")
    by_target: dict[tuple[str | None, str | None], list[TargetMinute]] = {}
    for t in targets:
        by_target.setdefault((t.provider, t.model), []).append(t)
    data: list[dict[str, Any]] = []
    any_quota = False
    for index, rows in enumerate(by_target.values()):
        color = SHARD_COLORS[index % len(SHARD_COLORS)]
        name, x = _label(rows[0]), _x(rows)
        for axis, used, quota, unit in (
            ("y", [t.used_tpm for t in rows], [t.quota_tpm for t in rows], "tokens"),
            ("y2", [t.used_rpm for t in rows], [t.quota_rpm for t in rows], "requests"),
        ):
            data.append(
                {"type": "bar", "x": x, "y": used, "name": f"{name} {unit} used",
                 "marker": {"color": color, "opacity": 0.55}, "yaxis": axis,
                 "legendgroup": name, **MINUTE_PERIOD}
            )  # fmt: skip
            if any(q is not None for q in quota):
                any_quota = True
                data.append(
                    {"type": "scatter", "x": x, "y": quota, "name": f"{name} {unit} quota",
                     "mode": "lines", "line": {"color": color, "dash": "dash", "shape": "hv"},
                     "yaxis": axis, "legendgroup": name, **MINUTE_PERIOD}
                )  # fmt: skip
        limited = [t for t in rows if t.rate_limited]
        if limited:
            data.append(
                {"type": "scatter", "x": _x(limited), "y": [t.used_tpm for t in limited],
                 "text": [f"{t.rate_limited} rate limited" for t in limited],
                 "name": f"{name} rate limited (429)", "mode": "markers",
                 "marker": {"color": RETRY_COLOR, "symbol": "x", "size": 9}, "yaxis": "y",
                 "legendgroup": name, **MINUTE_PERIOD}
            )  # fmt: skip
    minutes = sorted({m for trace in data for m in trace["x"]})
    data = [
        part
        for trace in data
        for part in (
            split_open(trace, [m in open_minutes for m in trace["x"]])
            if trace.get("mode") != "markers"
            else [trace]
        )
    ]
    layout = base_layout(
        height=480,
        margin={"l": 64, "r": 64, "t": 140, "b": 56},
        barmode="group",
        title={"text": "Used versus quota per target (provider/model)", "x": 0, "y": 0.98},
        # Below the requests panel: the axis belongs to the whole figure, not the top panel.
        xaxis=time_axis(minutes=minutes) | {"anchor": "y2"},
        yaxis=value_axis("tokens per minute", domain=[0.55, 1]),
        yaxis2=value_axis("requests per minute", domain=[0, 0.42], anchor="x"),
    )
    fig = figure(data, layout)
    add_in_progress(fig, minutes, [m in open_minutes for m in minutes])
    if not any_quota:
        add_note(
            fig,
            f"quota: {NOT_MEASURED} (declare tpmledger.quota.tpm or capture the "
            "x-ratelimit-* response headers)",
        )
    return fig
