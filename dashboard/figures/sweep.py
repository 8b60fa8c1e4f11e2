"""Cap sweep: sustained TPM against cap with retry and success rate, the knee marked."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from analytics.cap_sweep import SweepResult
from dashboard.display import fmt_int
from dashboard.figures.chart_style import (
    PEAK_COLOR,
    RETRY_COLOR,
    SUCCESS_COLOR,
    base_layout,
    message_figure,
    rate_axis,
)


def sweep_figure(view: SweepResult) -> go.Figure:
    """Bars of sustained total TPM per cap; rates on a second axis; a line at the knee."""
    if not view.points:
        return message_figure("No sealed run of this sweep declares a concurrency cap yet.")
    caps = [str(p.cap) for p in view.points]  # category axis: even spacing per cap
    data: list[Any] = [
        go.Bar(
            x=caps,
            y=[p.sustained_tpm_total for p in view.points],
            name="sustained TPM (total: prompt + completion)",
            marker={"color": "#4C78A8"},
            hovertemplate="%{y:,.0f}",
        )
    ]
    for attr, name, color, dash in (
        ("call_success_rate", "call success rate", SUCCESS_COLOR, "solid"),
        ("retry_rate", "retry rate", RETRY_COLOR, "dot"),
    ):
        values = [getattr(p, attr) for p in view.points]
        if any(v is not None for v in values):
            data.append(
                go.Scatter(
                    x=caps,
                    y=values,
                    name=name,
                    yaxis="y2",
                    mode="lines+markers",
                    line={"color": color, "dash": dash, "width": 2},
                    hovertemplate="%{y:.1%}",
                )
            )
    figure = go.Figure(
        data=data,
        layout=base_layout(
            height=420,
            xaxis={"title": {"text": "concurrency cap per shard"}, "type": "category"},
            yaxis={"title": {"text": "sustained TPM (total)"}, "rangemode": "tozero"},
            yaxis2=rate_axis("call success / retry rate"),
        ),
    )
    if view.knee_cap is not None:
        knee = next(p for p in view.points if p.cap == view.knee_cap)
        figure.add_shape(
            type="line",
            x0=str(knee.cap),
            x1=str(knee.cap),
            xref="x",
            y0=0,
            y1=1,
            yref="paper",
            line={"color": PEAK_COLOR, "width": 2, "dash": "dash"},
        )
        figure.add_annotation(
            name="knee",
            x=str(knee.cap),
            y=1,
            xref="x",
            yref="paper",
            yanchor="bottom",
            showarrow=False,
            font={"color": PEAK_COLOR},
            text=f"knee: recommended cap {knee.cap} ({fmt_int(knee.sustained_tpm_total)} TPM)",
        )
    return figure
