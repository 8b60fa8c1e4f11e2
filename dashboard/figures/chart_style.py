"""The look every chart shares: transparent backgrounds (light and dark), UTC time axes.

Figures are plain Plotly JSON dicts (``{"data": [...], "layout": {...}}``), which Dash
sends to plotly.js as they are. Building ``plotly.graph_objects.Figure`` objects instead
validates every property in Python and cost 60–80 ms per chart here, a quarter of the
300 ms callback budget (README.md#benchmarks); the tests check the dicts' content instead.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

Figure = dict[str, Any]

GRID = "rgba(128, 128, 128, 0.22)"
# Okabe–Ito palette (colour-blind safe) for rates and markers; shards use a Tableau-like set.
SUCCESS_COLOR = "#009E73"
RETRY_COLOR = "#D55E00"
PEAK_COLOR = "#CC79A7"
CAP_COLOR = "#E69F00"
SHARD_COLORS = (
    "#4C78A8",
    "#72B7B2",
    "#54A24B",
    "#EECA3B",
    "#B279A2",
    "#FF9DA6",
    "#9D755D",
    "#BAB0AC",
    "#F58518",
    "#E45756",
)


# Per-minute traces: each value covers its whole UTC minute [HH:MM, HH:MM+1) and is drawn at
# the minute's middle, so a bar spans exactly its minute whatever the zoom.
MINUTE_PERIOD: dict[str, Any] = {"xperiod": 60_000, "xperiodalignment": "middle"}


def plot_text(value: str) -> str:
    """A user string (shard or run id) as Plotly shows it literally: Plotly renders a
    subset of HTML in names, labels and hover texts, so ``<a href=…>`` would become a link."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def minute_middle(minute: str) -> str:
    """The x position of a ``YYYY-MM-DD HH:MM`` minute's middle (for markers)."""
    return f"{minute}:30"


def base_layout(**overrides: Any) -> dict[str, Any]:
    """Layout defaults; text colour follows the page theme through ``assets/theme.css``."""
    layout: dict[str, Any] = {
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "margin": {"l": 64, "r": 64, "t": 56, "b": 56},
        # Above the plot: below it, it would collide with the "minute (UTC)" axis title.
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
        "hovermode": "x unified",
        "font": {"size": 12},
        "xaxis": {"gridcolor": GRID, "zeroline": False},
        "yaxis": value_axis(""),
        "annotations": [],
        "shapes": [],
        # Keep the user's zoom when a live refresh redraws the chart.
        "uirevision": "keep",
    }
    layout.update(overrides)
    return layout


# Up to this many minutes, an axis gets a range, minute ticks and points drawn as markers:
# Plotly's automatic range for one or two minutes zooms to milliseconds and one bar fills
# the width, and a line of one point is invisible.
SHORT_SERIES_MINUTES = 3


def time_axis(title: str = "minute (UTC)", minutes: list[str] | None = None) -> dict[str, Any]:
    """A minute axis whose labels are UTC (the x values already are UTC strings).

    With a short series (``minutes``), the axis spans a minute more on each side and
    ticks every minute as ``HH:MM``.
    """
    axis: dict[str, Any] = {
        "title": {"text": title}, "type": "date", "gridcolor": GRID, "zeroline": False
    }  # fmt: skip
    if minutes and len(minutes) <= SHORT_SERIES_MINUTES:
        first = datetime.strptime(minutes[0], "%Y-%m-%d %H:%M")
        last = datetime.strptime(minutes[-1], "%Y-%m-%d %H:%M")
        span = (first - timedelta(minutes=1), last + timedelta(minutes=2))
        axis |= {
            "range": [t.strftime("%Y-%m-%d %H:%M") for t in span],
            "dtick": 60_000,
            "tickformat": "%H:%M",
        }
    return axis


def line_mode(minutes: list[str]) -> str:
    """Lines, with markers when there are too few points for a line to show."""
    return "lines+markers" if len(minutes) <= SHORT_SERIES_MINUTES else "lines"


def value_axis(title: str, **extra: Any) -> dict[str, Any]:
    """A y axis starting at zero."""
    return {"title": {"text": title}, "rangemode": "tozero", "gridcolor": GRID,
            "zeroline": False, **extra}  # fmt: skip


def rate_axis(title: str = "rate") -> dict[str, Any]:
    """A second y axis for fractions in [0, 1], shown as percentages."""
    return {
        "title": {"text": title},
        "overlaying": "y",
        "side": "right",
        "range": [0, 1.05],
        "tickvals": [0, 0.25, 0.5, 0.75, 1],
        "tickformat": ".0%",
        "showgrid": False,
        "zeroline": False,
    }


def figure(data: list[dict[str, Any]], layout: dict[str, Any]) -> Figure:
    """A figure dict as ``dcc.Graph`` takes it."""
    return {"data": data, "layout": layout}


def message_figure(message: str, *, height: int = 320) -> Figure:
    """An empty chart that says why it is empty (e.g. "TTFT: not measured")."""
    layout = base_layout(height=height, xaxis={"visible": False}, yaxis={"visible": False})
    layout["annotations"].append(
        {"text": message, "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5,
         "y": 0.5, "font": {"size": 15}}
    )  # fmt: skip
    return figure([], layout)


def add_note(fig: Figure, text: str) -> None:
    """A "… not measured" note in the plot's top-right corner (named for tests and tools)."""
    fig["layout"]["annotations"].append(
        {
            "name": "not-measured",
            "text": text,
            "showarrow": False,
            "xref": "paper",
            "yref": "paper",
            "x": 1,
            "y": 0.98,
            "xanchor": "right",
            "yanchor": "top",
            "bgcolor": "rgba(128, 128, 128, 0.15)",
        }
    )


def add_marker(fig: Figure, x: Any, text: str, name: str, color: str = PEAK_COLOR) -> None:
    """A dashed vertical line at ``x`` with a label above the plot (peak minute, knee)."""
    fig["layout"]["shapes"].append(
        {"type": "line", "x0": x, "x1": x, "xref": "x", "y0": 0, "y1": 1, "yref": "paper",
         "line": {"color": color, "width": 2, "dash": "dash"}}
    )  # fmt: skip
    fig["layout"]["annotations"].append(
        {"name": name, "text": text, "x": x, "y": 1, "xref": "x", "yref": "paper",
         "yanchor": "bottom", "showarrow": False, "font": {"color": color}}
    )  # fmt: skip


# Open minutes (docs/dashboard.md#in-progress-minutes): still filling, drawn apart so a
# chart never ends in a false cliff.
IN_PROGRESS = "in progress (open minute)"
IN_PROGRESS_FILL = "rgba(128, 128, 128, 0.12)"
IN_PROGRESS_GROUP = "in-progress"


def open_positions(states: list[str], count: int) -> list[bool]:
    """Per minute of a series: True where the minute is still open."""
    return [i < len(states) and states[i] == "open" for i in range(count)]


def split_open(trace: dict[str, Any], is_open: list[bool]) -> list[dict[str, Any]]:
    """A trace over its settled minutes and, when some are open, its in-progress part.

    Bars in progress keep their colour, translucent and hatched; lines continue dotted
    from the last settled minute. The in-progress part joins the legend group
    :data:`IN_PROGRESS_GROUP` (one legend entry per chart, see :func:`add_in_progress`).
    """
    ys = list(trace.get("y", []))
    if not any(is_open) or len(ys) != len(is_open):
        return [trace]
    settled = {**trace, "y": [None if o else y for y, o in zip(ys, is_open, strict=True)]}
    if trace.get("type") == "bar":
        marker = dict(trace.get("marker", {}))
        marker.update(pattern={"shape": "/", "fillmode": "overlay", "solidity": 0.35},
                      opacity=0.45)  # fmt: skip
        shown = [y if o else None for y, o in zip(ys, is_open, strict=True)]
        hover = trace.get("hovertemplate", "%{y}")
        part = {**trace, "y": shown, "marker": marker, "hovertemplate": f"{hover} (in progress)"}
    else:
        first = is_open.index(True)
        keep = [o or i == first - 1 for i, o in enumerate(is_open)]
        shown = [y if k else None for y, k in zip(ys, keep, strict=True)]
        line = {**trace.get("line", {}), "dash": "dot"}
        part = {**trace, "y": shown, "line": line, "opacity": 0.6, "fill": None}
        part["mode"] = "lines+markers"
    part.update(
        showlegend=False,
        legendgroup=IN_PROGRESS_GROUP,
        name=f"{trace.get('name', '')} (in progress)",
    )
    return [settled, part]


def add_in_progress(
    fig: Figure, minutes: list[str], is_open: list[bool], label_y: float = 1.0
) -> None:
    """A shaded, labelled band over the open minutes and one "in progress" legend entry;
    the label hangs from ``label_y`` (paper units: the top of the plot area by default)."""
    spans = [m for m, o in zip(minutes, is_open, strict=True) if o]
    if not spans:
        return
    end = (datetime.strptime(spans[-1], "%Y-%m-%d %H:%M") + timedelta(minutes=1)).strftime(
        "%Y-%m-%d %H:%M"
    )
    fig["layout"]["shapes"].append(
        {"type": "rect", "x0": spans[0], "x1": end, "xref": "x", "y0": 0, "y1": 1,
         "yref": "paper", "fillcolor": IN_PROGRESS_FILL, "layer": "below",
         "line": {"width": 1, "dash": "dot", "color": "rgba(128, 128, 128, 0.6)"}}
    )  # fmt: skip
    fig["layout"]["annotations"].append(
        {"name": "in-progress", "text": "in progress", "x": spans[0], "xanchor": "left",
         "y": label_y, "yanchor": "top", "xref": "x", "yref": "paper", "showarrow": False,
         "font": {"size": 11}, "opacity": 0.8}
    )  # fmt: skip
    add_in_progress_legend(fig)


def add_in_progress_legend(fig: Figure) -> None:
    """The legend entry: an empty hatched bar in the group every in-progress part joins."""
    fig["data"].append(
        {"type": "bar", "x": [None], "y": [None], "name": IN_PROGRESS,
         "legendgroup": IN_PROGRESS_GROUP, "showlegend": True, "hoverinfo": "skip",
         "marker": {"color": "rgba(128, 128, 128, 0.45)",
                    "pattern": {"shape": "/", "fillmode": "overlay", "solidity": 0.35}}}
    )  # fmt: skip
