"""Shard balance: each shard's share of the run's tokens against an even split (SPEC §4)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go

from dashboard.data.minute_series import shard_sort_key
from dashboard.display import NOT_MEASURED
from dashboard.figures.chart_style import SHARD_COLORS, base_layout, message_figure


def shard_balance_figure(balance: Mapping[str, Any] | None) -> go.Figure:
    """Bars of token shares, a dashed line at the mean share, imbalance in the title."""
    shares: Mapping[str, float] = (balance or {}).get("shares") or {}
    if not shares:
        return message_figure(f"Shard balance: {NOT_MEASURED}")
    shard_ids = sorted(shares, key=shard_sort_key)
    imbalance = (balance or {}).get("imbalance")
    title = "imbalance (max share / mean share): " + (
        f"{imbalance:.2f}" if imbalance is not None else NOT_MEASURED
    )
    figure = go.Figure(
        data=[
            go.Bar(
                x=[f"shard {s}" for s in shard_ids],
                y=[shares[s] for s in shard_ids],
                marker={
                    "color": [SHARD_COLORS[i % len(SHARD_COLORS)] for i in range(len(shard_ids))]
                },
                hovertemplate="%{y:.1%} of tokens<extra></extra>",
                name="share of tokens",
            )
        ],
        layout=base_layout(
            height=320,
            title={"text": title, "font": {"size": 13}},
            yaxis={
                "title": {"text": "share of tokens (total)"},
                "tickformat": ".0%",
                "rangemode": "tozero",
            },
            showlegend=False,
            hovermode="closest",
        ),
    )
    figure.add_hline(
        y=1 / len(shard_ids),
        line={"dash": "dash", "width": 1},
        annotation_text="even split",
        annotation_position="top right",
    )
    return figure
