"""Shard balance: each shard's share of the run's tokens against an even split (docs/metrics.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpmledger.dashboard.data.minute_series import shard_sort_key
from tpmledger.dashboard.display import NOT_MEASURED
from tpmledger.dashboard.figures.chart_style import (
    SHARD_COLORS,
    Figure,
    base_layout,
    figure,
    message_figure,
    plot_text,
    value_axis,
)


def shard_balance_figure(balance: Mapping[str, Any] | None) -> Figure:
    """Bars of token shares, a dashed line at the mean share, imbalance in the title."""
    shares: Mapping[str, float] = (balance or {}).get("shares") or {}
    if not shares:
        return message_figure(f"Shard balance: {NOT_MEASURED}")
    shard_ids = sorted(shares, key=shard_sort_key)
    imbalance = (balance or {}).get("imbalance")
    title = "imbalance (max share / mean share): " + (
        f"{imbalance:.2f}" if imbalance is not None else NOT_MEASURED
    )
    even = 1 / len(shard_ids)
    bars = {
        "type": "bar",
        "x": [f"shard {plot_text(s)}" for s in shard_ids],
        "y": [shares[s] for s in shard_ids],
        "marker": {"color": [SHARD_COLORS[i % len(SHARD_COLORS)] for i in range(len(shard_ids))]},
        "hovertemplate": "%{y:.1%} of tokens<extra></extra>",
        "name": "share of tokens",
    }
    layout = base_layout(
        height=320,
        # Left-aligned, clear of the mode bar in the top-right corner.
        title={"text": title, "font": {"size": 13}, "x": 0.01, "xanchor": "left"},
        yaxis=value_axis("share of tokens (total)", tickformat=".0%"),
        showlegend=False,
        hovermode="closest",
    )
    layout["shapes"].append(
        {"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": even, "y1": even,
         "line": {"dash": "dash", "width": 1, "color": "rgba(128, 128, 128, 0.9)"}}
    )  # fmt: skip
    layout["annotations"].append(
        {"name": "even-split", "text": "even split", "xref": "paper", "x": 1, "xanchor": "right",
         "yref": "y", "y": even, "yanchor": "bottom", "showarrow": False}
    )  # fmt: skip
    return figure([bars], layout)
