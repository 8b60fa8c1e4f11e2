"""Cap sweep: sustained TPM against cap with retry and success rate, the knee marked."""

from __future__ import annotations

from typing import Any

from tpmledger.analytics.verdicts.cap_sweep import SweepResult
from tpmledger.dashboard.display import fmt_int
from tpmledger.dashboard.figures.chart_style import (
    RETRY_COLOR,
    SUCCESS_COLOR,
    Figure,
    add_marker,
    base_layout,
    figure,
    message_figure,
    rate_axis,
    value_axis,
)


def sweep_figure(view: SweepResult) -> Figure:
    """Bars of sustained total TPM per cap; rates on a second axis; a line at the knee."""
    if not view.points:
        return message_figure("No sealed run of this sweep declares a concurrency cap yet.")
    caps = [str(p.cap) for p in view.points]  # category axis: even spacing per cap
    data: list[dict[str, Any]] = [
        {
            "type": "bar",
            "x": caps,
            "y": [p.sustained_tpm_total for p in view.points],
            "name": "sustained TPM (total: prompt + completion)",
            "marker": {"color": "#4C78A8"},
            "hovertemplate": "%{y:,.0f}",
        }
    ]
    for attr, name, color, dash in (
        ("call_success_rate", "call success rate", SUCCESS_COLOR, "solid"),
        ("retry_rate", "retry rate", RETRY_COLOR, "dot"),
    ):
        values = [getattr(p, attr) for p in view.points]
        if any(v is not None for v in values):
            data.append(
                {
                    "type": "scatter",
                    "x": caps,
                    "y": values,
                    "name": name,
                    "yaxis": "y2",
                    "mode": "lines+markers",
                    "line": {"color": color, "dash": dash, "width": 2},
                    "hovertemplate": "%{y:.1%}",
                }
            )
    layout = base_layout(
        height=420,
        margin={"l": 64, "r": 64, "t": 40, "b": 120},
        legend={"orientation": "h", "y": -0.25, "yanchor": "top", "x": 0},
        xaxis={"title": {"text": "concurrency cap per shard"}, "type": "category"},
        yaxis=value_axis("sustained TPM (total)"),
        yaxis2=rate_axis("call success / retry rate"),
    )
    fig = figure(data, layout)
    knee = next((i for i, p in enumerate(view.points) if p.cap == view.knee_cap), None)
    if knee is not None:
        point = view.points[knee]
        text = f"knee: recommended cap {point.cap} ({fmt_int(point.sustained_tpm_total)} TPM)"
        # On a category axis a number is a category's index; the cap label "16" would be
        # read as the 17th category.
        add_marker(fig, knee, text, "knee")
    return fig
