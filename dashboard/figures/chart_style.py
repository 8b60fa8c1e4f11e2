"""The look every chart shares: transparent backgrounds (light and dark), UTC time axes."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

GRID = "rgba(128, 128, 128, 0.22)"
# Okabe–Ito palette (colour-blind safe) for rates and markers; shards use Plotly's qualitative set.
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


def base_layout(**overrides: Any) -> dict[str, Any]:
    """Layout defaults; text colour follows the page theme through ``assets/theme.css``."""
    layout: dict[str, Any] = {
        "template": "plotly_white",
        "paper_bgcolor": "rgba(0,0,0,0)",
        "plot_bgcolor": "rgba(0,0,0,0)",
        "margin": {"l": 64, "r": 64, "t": 56, "b": 56},
        # Above the plot: below it, it would collide with the "minute (UTC)" axis title.
        "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
        "hovermode": "x unified",
        "font": {"size": 12},
        "xaxis": {"gridcolor": GRID, "zeroline": False},
        "yaxis": {"gridcolor": GRID, "zeroline": False, "rangemode": "tozero"},
        "uirevision": "keep",
    }
    layout.update(overrides)
    return layout


def time_axis(title: str = "minute (UTC)") -> dict[str, Any]:
    """A minute axis whose labels are UTC (the x values already are UTC strings)."""
    return {"title": {"text": title}, "type": "date", "gridcolor": GRID, "zeroline": False}


def rate_axis(title: str = "rate") -> dict[str, Any]:
    """A second y axis for fractions in [0, 1], shown as percentages."""
    return {
        "title": {"text": title},
        "overlaying": "y",
        "side": "right",
        "range": [0, 1.05],
        "tickformat": ".0%",
        "showgrid": False,
        "zeroline": False,
    }


def message_figure(message: str, *, height: int = 320) -> go.Figure:
    """An empty chart that says why it is empty (e.g. "TTFT: not measured")."""
    figure = go.Figure(layout=base_layout(height=height))
    figure.update_xaxes(visible=False)
    figure.update_yaxes(visible=False)
    figure.add_annotation(
        text=message,
        showarrow=False,
        xref="paper",
        yref="paper",
        x=0.5,
        y=0.5,
        font={"size": 15},
    )
    return figure


def add_note(figure: go.Figure, text: str) -> None:
    """A "… not measured" note in the plot's top-right corner (named for tests and tools)."""
    figure.add_annotation(
        name="not-measured",
        text=text,
        showarrow=False,
        xref="paper",
        yref="paper",
        x=1,
        y=0.98,
        xanchor="right",
        yanchor="top",
        bgcolor="rgba(128, 128, 128, 0.15)",
    )
