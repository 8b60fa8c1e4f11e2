"""Used versus quota per target (docs/metrics.md#quota-headroom, docs/dashboard.md run page).

One panel per target (provider/model), each on its own scale: the share of the target's
quota used per minute, tokens and requests as bars, with the quota itself the 100 % line;
so a 900 k tokens/min quota is as readable beside a 40 M one. A target that reports no
quota shows its tokens used per minute instead, and its panel says so. Minutes with
rate-limited attempts get a marker above their bar. Each panel's title gives the lowest
headroom and its minute; :func:`headroom_lines` says the same in words for the page.
Open minutes (still filling, docs/dashboard.md#in-progress-minutes) are drawn in progress,
as on the run's other charts.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from tpmledger.analytics.kernels.quota_headroom import headroom_requests, headroom_tokens
from tpmledger.dashboard.display import NOT_MEASURED
from tpmledger.dashboard.figures.chart_style import (
    CAP_COLOR,
    GRID,
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
)
from tpmledger.storage.codecs.time_text import minute_text_ns
from tpmledger.storage.readers.target_minutes import TargetMinute

#: Height of one target's panel, and of the figure's title above the panels.
PANEL_PX = 170
TITLE_PX = 44
#: The legend sits below the time axis (its two lines of tick labels and its title), in
#: rows of :data:`LEGEND_ROW_PX`, at most :data:`LEGEND_PER_ROW` entries a row on a narrow
#: page. Above the panels, its wrapped rows ran into the figure's title and the first
#: panel's title (seen in a real browser).
AXIS_PX = 76
LEGEND_ROW_PX = 22
LEGEND_PER_ROW = 2

Target = tuple[str | None, str | None]


def _label(t: TargetMinute) -> str:
    return plot_text(f"{t.provider or '?'}/{t.model or '?'}")


def _x(rows: Sequence[TargetMinute]) -> list[str]:
    # The dashboard's minute strings: "YYYY-MM-DD HH:MM" (UTC).
    return [minute_text_ns(t.minute_ns)[:16].replace("T", " ") for t in rows]


def dashboard_minute(minute_utc: str) -> str:
    """``2026-11-26T14:39:00Z`` as the dashboard's minute text, ``2026-11-26 14:39``."""
    return minute_utc[:16].replace("T", " ")


def _by_target(targets: Sequence[TargetMinute]) -> dict[Target, list[TargetMinute]]:
    by_target: dict[Target, list[TargetMinute]] = {}
    for t in targets:
        by_target.setdefault((t.provider, t.model), []).append(t)
    return by_target


def _headroom(t: TargetMinute) -> tuple[float, str] | None:
    """The minute's lower headroom and its measure (``tokens``/``requests``), or None."""
    found = [
        (h, measure)
        for h, measure in ((headroom_tokens(t), "tokens"), (headroom_requests(t), "requests"))
        if h is not None
    ]
    return min(found) if found else None


def lowest_headroom(
    rows: Sequence[TargetMinute], open_minutes: Collection[str] = ()
) -> tuple[TargetMinute, float, str] | None:
    """The target's minute with the lowest headroom (the first such minute), its headroom
    and measure; None when the target reports no quota. Open minutes (still filling)
    count only when the target has no other."""
    settled = [t for t, m in zip(rows, _x(rows), strict=True) if m not in open_minutes]
    best: tuple[TargetMinute, float, str] | None = None
    for t in settled or rows:
        found = _headroom(t)
        if found is not None and (best is None or found[0] < best[1]):
            best = (t, *found)
    return best


def _percent(value: float) -> str:
    return f"{value * 100:.1f} %"


def _used_words(t: TargetMinute, measure: str) -> str:
    if measure == "tokens":
        return f"{t.used_tpm:,} of {t.quota_tpm:,.0f} tokens"
    return f"{t.used_rpm:,} of {t.quota_rpm:,.0f} requests"


def headroom_lines(
    targets: Sequence[TargetMinute], open_minutes: Collection[str] = ()
) -> list[str]:
    """One sentence per target: its lowest quota headroom, in which minute, from what
    (settled minutes first: an open minute is still filling)."""
    lines = []
    for rows in _by_target(targets).values():
        name = f"{rows[0].provider or '?'}/{rows[0].model or '?'}"
        limited = sum(t.rate_limited for t in rows)
        tail = f"; {limited:,} attempts rate limited (429)" if limited else ""
        low = lowest_headroom(rows, open_minutes)
        if low is None:
            lines.append(f"{name}: quota {NOT_MEASURED}, so no headroom{tail}.")
            continue
        t, headroom, measure = low
        minute = _x([t])[0]
        over = " (over its quota)" if headroom < 0 else ""
        lines.append(
            f"{name}: lowest headroom {_percent(headroom)} of its {measure} quota{over}, "
            f"in minute {minute} UTC ({_used_words(t, measure)}){tail}."
        )
    return lines


def _share(used: int, quota: float | None) -> float | None:
    return None if not quota else used / quota


def _panel_traces(
    rows: list[TargetMinute], axis: str, color: str
) -> tuple[list[dict[str, Any]], bool]:
    """One target's traces on ``axis`` (``y``, ``y2``…); True when they are shares."""
    name, x = _label(rows[0]), _x(rows)
    common = {"yaxis": axis, "xaxis": "x", "legendgroup": name, **MINUTE_PERIOD}
    normalized = lowest_headroom(rows) is not None
    data: list[dict[str, Any]] = []
    if normalized:
        for measure, used, quota, opacity in (
            ("tokens", [t.used_tpm for t in rows], [t.quota_tpm for t in rows], 0.75),
            ("requests", [t.used_rpm for t in rows], [t.quota_rpm for t in rows], 0.4),
        ):
            shares = [_share(u, q) for u, q in zip(used, quota, strict=True)]
            if all(s is None for s in shares):
                continue
            hover = [
                f"{u:,} of {q:,.0f} {measure}" if q else f"{u:,} {measure}, quota {NOT_MEASURED}"
                for u, q in zip(used, quota, strict=True)
            ]
            data.append(
                {"type": "bar", "x": x, "y": shares, "name": f"{name} {measure} used",
                 "text": hover, "hovertemplate": "%{y:.1%} of quota: %{text}",
                 "textposition": "none", "marker": {"color": color, "opacity": opacity},
                 "offsetgroup": measure, **common}
            )  # fmt: skip
    else:
        data.append(
            {"type": "bar", "x": x, "y": [t.used_tpm for t in rows],
             "name": f"{name} tokens used", "marker": {"color": color, "opacity": 0.55},
             "offsetgroup": "tokens", **common}
        )  # fmt: skip
    limited = [t for t in rows if t.rate_limited]
    if limited:
        tops = [
            max(
                (s for s in (_share(t.used_tpm, t.quota_tpm), _share(t.used_rpm, t.quota_rpm))
                 if s is not None),
                default=0.0,
            )
            if normalized
            else t.used_tpm
            for t in limited
        ]  # fmt: skip
        data.append(
            {"type": "scatter", "x": _x(limited), "y": tops,
             "text": [f"{t.rate_limited} rate limited" for t in limited],
             "name": f"{name} rate limited (429)", "mode": "markers",
             "marker": {"color": RETRY_COLOR, "symbol": "x", "size": 9}, **common}
        )  # fmt: skip
    return data, normalized


def _panel_title(rows: list[TargetMinute], open_minutes: Collection[str]) -> str:
    name = _label(rows[0])
    low = lowest_headroom(rows, open_minutes)
    if low is None:
        return f"<b>{name}</b>: tokens used per minute (quota {NOT_MEASURED})"
    t, headroom, measure = low
    return f"<b>{name}</b>: lowest headroom {_percent(headroom)} ({measure}) at {_x([t])[0][11:]}"


def quota_figure(targets: Sequence[TargetMinute], open_minutes: Collection[str] = ()) -> Figure:
    """One panel per target, share of its quota used per minute (tokens used when it
    reports none); ``open_minutes`` (dashboard minute text) are drawn in progress."""
    if not targets:
        return message_figure(f"Used versus quota: {NOT_MEASURED} (no attempts yet)")
    groups = list(_by_target(targets).values())
    count = len(groups)
    slot = 1.0 / count
    title_band = 30 / (PANEL_PX * count)  # a panel's title line, in paper units
    data: list[dict[str, Any]] = []
    axes: dict[str, Any] = {}
    annotations: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    any_quota = False
    for index, rows in enumerate(groups):
        color = SHARD_COLORS[index % len(SHARD_COLORS)]
        axis = "y" if index == 0 else f"y{index + 1}"
        top = 1.0 - index * slot
        bottom = top - slot + (0.0 if index == count - 1 else title_band * 0.6)
        domain = [max(0.0, bottom), top - title_band]
        traces, normalized = _panel_traces(rows, axis, color)
        any_quota = any_quota or normalized
        data += traces
        layout_key = "yaxis" if index == 0 else f"yaxis{index + 1}"
        axes[layout_key] = {
            "title": {"text": "share of quota" if normalized else "tokens/min"},
            "domain": domain, "anchor": "x", "rangemode": "tozero", "gridcolor": GRID,
            "zeroline": False,
        }  # fmt: skip
        if normalized:  # the quota line and the tallest bar in view, whatever the scale
            tallest = max((y for tr in traces for y in tr["y"] if y is not None), default=0)
            axes[layout_key] |= {"tickformat": ".0%", "range": [0, max(1.1, tallest * 1.08)]}
        annotations.append(
            {"name": "target-title", "text": _panel_title(rows, open_minutes), "showarrow": False,
             "xref": "paper", "yref": "paper", "x": 0, "y": top, "xanchor": "left",
             "yanchor": "top", "font": {"size": 12}}
        )  # fmt: skip
        if normalized:  # the quota: 100 % of it
            shapes.append(
                {"type": "line", "name": "quota", "xref": "paper", "x0": 0, "x1": 1,
                 "yref": axis, "y0": 1, "y1": 1,
                 "line": {"color": CAP_COLOR, "width": 2, "dash": "dash"}}
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
    # Every trace with a legend entry, one per entry ("in progress" is added below).
    entries = sum(1 for trace in data if trace.get("showlegend", True)) + (
        1 if any(m in open_minutes for m in minutes) else 0
    )
    legend_px = LEGEND_ROW_PX * -(-entries // LEGEND_PER_ROW)
    panels_px = PANEL_PX * count
    layout = base_layout(
        height=TITLE_PX + panels_px + AXIS_PX + legend_px + 8,
        margin={"l": 72, "r": 48, "t": TITLE_PX, "b": AXIS_PX + legend_px + 8},
        barmode="group",
        title={"text": "Used versus quota per target (100 % = the quota)", "x": 0, "y": 0.99},
        # In rows, one entry after another (grouped, each target's entries made a column).
        legend={
            "orientation": "h",
            "x": 0,
            "y": -AXIS_PX / panels_px,
            "yanchor": "top",
            "traceorder": "normal",
        },
        # Below the lowest panel: the axis belongs to the whole figure.
        xaxis=time_axis(minutes=minutes) | {"anchor": "y" if count == 1 else f"y{count}"},
        **axes,
    )
    layout["annotations"] += annotations
    layout["shapes"] += shapes
    fig = figure(data, layout)
    # Its label under the first panel's title band: at the top it ran into the title when
    # the open minute lay under the title's text (a run's first minutes).
    add_in_progress(fig, minutes, [m in open_minutes for m in minutes], label_y=1.0 - title_band)
    if not any_quota:
        add_note(
            fig,
            f"quota: {NOT_MEASURED} (declare tpmledger.quota.tpm or capture the "
            "x-ratelimit-* response headers)",
        )
    return fig
