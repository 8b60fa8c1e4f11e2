"""Sweep page (``/sweeps?sweep_id=…``): TPM against cap, rates, knee and recommended cap.

The sweep and its knee come from ``analytics.cap_sweep.load_sweep``, which reads each
run's final snapshot, or the live minute table while the run is still receiving data; the
page draws it, says which caps are sealed or live, labels the recommendation provisional
while any cap is live (docs/dashboard.md#sweeps) and prints the thresholds.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, dcc, html

from tpmledger.analytics.verdicts.cap_sweep import SweepResult, load_sweep, walk_label
from tpmledger.dashboard.components.bottleneck_panel import verdict_words
from tpmledger.dashboard.components.empty_states import no_sweeps_state
from tpmledger.dashboard.components.kpi_cards import NOT_YET
from tpmledger.dashboard.components.status_badge import status_badge
from tpmledger.dashboard.config import DashboardConfig
from tpmledger.dashboard.data.run_records import list_sweep_ids
from tpmledger.dashboard.display import NOT_MEASURED, fmt_int, fmt_rate, fmt_seconds
from tpmledger.dashboard.figures.chart_style import Figure, message_figure
from tpmledger.dashboard.figures.sweep import sweep_figure
from tpmledger.dashboard.pages.runs import run_href
from tpmledger.storage.server.database import in_one_snapshot, read_view


def thresholds_text(view: SweepResult) -> str:
    """The acceptance rule with its parameters, printed with every result (docs/metrics.md)."""
    t = view.thresholds
    return (
        f"Walking caps upward, a cap is accepted while sustained TPM rises by more than "
        f"{fmt_rate(t.min_throughput_gain)}, retry rate rises by at most "
        f"{t.max_retry_rate_rise * 100:.1f} points and call success rate falls by at most "
        f"{t.max_success_rate_drop * 100:.1f} points against the previous cap; the knee is "
        "the last accepted cap."
    )


_COLUMNS = (
    "Cap",
    "Status",
    "Run",
    "Sustained TPM (total)",
    "Call success",
    "Retry rate",
    "TTFT p95",
    "Bottleneck",
    "Serving side",
    "Verdict of the walk",
)


def _bottleneck(bottleneck: dict[str, Any] | None) -> Any:
    """The run's verdict in words, its reason on hover (docs/metrics.md#bottleneck)."""
    words = verdict_words(bottleneck)
    reason = (bottleneck or {}).get("reason")
    return html.Span(words, title=reason) if reason else words


def server_saturation_text(bottleneck: dict[str, Any] | None) -> str:
    """Each cap's server saturation from its verdict's server evidence
    (docs/metrics.md#serving-side-metrics): how many inner minutes the servers were
    saturated (queue with a full KV cache or preemptions) or idle; "not measured" without
    server metrics."""
    server = ((bottleneck or {}).get("evidence") or {}).get("server")
    if not server or not server.get("minutes"):
        return NOT_MEASURED
    minutes = server["minutes"]
    return f"saturated {server['saturated']} of {minutes} min · idle {server['idle']}"


def _later(status: str, text: str) -> str:
    return NOT_YET if status == "live" and text == NOT_MEASURED else text


def recommendation_text(view: SweepResult) -> str:
    """The recommended cap, labelled provisional while any compared cap is live."""
    if view.knee_cap is None:
        return "Recommended cap: not measured (no run with a cap has figures yet)"
    if view.provisional:
        live = ", ".join(str(p.cap) for p in view.points if p.status == "live")
        return (
            f"Provisional recommendation: cap {view.knee_cap} — cap {live} still live; "
            "final once every compared cap is sealed"
        )
    return f"Recommended cap: {view.knee_cap}"


def _points_table(view: SweepResult) -> dbc.Table:
    rows = [
        html.Tr(
            [
                html.Td(
                    [str(p.cap), " ", dbc.Badge("knee", color="info")]
                    if p.cap == view.knee_cap
                    else str(p.cap)
                ),
                html.Td(status_badge(p.status)),
                html.Td(dcc.Link(p.run_id, href=run_href(p.run_id))),
                html.Td(fmt_int(p.sustained_tpm_total)),
                html.Td(_later(p.status, fmt_rate(p.call_success_rate))),
                html.Td(fmt_rate(p.retry_rate)),
                html.Td(_later(p.status, fmt_seconds(p.ttft_p95_s))),
                html.Td(_bottleneck(p.bottleneck), className="small"),
                html.Td(server_saturation_text(p.bottleneck), className="small"),
                html.Td(walk_label(p), className="small"),
            ]
        )
        for p in view.points
    ]
    header = html.Thead(html.Tr([html.Th(h) for h in _COLUMNS]))
    return dbc.Table([header, html.Tbody(rows)], size="sm", hover=True, id="sweep-points")


def sweep_panels(config: DashboardConfig, sweep_id: str | None) -> tuple[Figure, Any, Any]:
    """Server-side work of the sweep callback: figure, recommendation, points table."""
    if not sweep_id:
        return message_figure(""), None, None
    view = in_one_snapshot(config.database_url, load_sweep, sweep_id)
    recommended = recommendation_text(view)
    skipped = (
        html.Div(
            f"Not placed (no cap declared, or no figures yet): {', '.join(view.skipped_run_ids)}",
            className="small text-body-secondary",
        )
        if view.skipped_run_ids
        else None
    )
    summary = html.Div(
        [
            html.Div(
                recommended,
                id="sweep-recommended",
                className="fs-5 fw-semibold"
                + (" text-warning-emphasis" if view.provisional else ""),
            ),
            html.Div(thresholds_text(view), id="sweep-thresholds", className="small mb-2"),
            skipped,
        ]
    )
    return sweep_figure(view), summary, _points_table(view)


def layout(config: DashboardConfig, sweep_id: str | None = None, **_query: Any) -> html.Div:
    """A sweep picker (read fresh on every visit) above the chart."""
    with read_view(config.database_url) as session:
        sweep_ids = list_sweep_ids(session)
    if not sweep_ids:
        return html.Div([html.H2("Cap sweeps", className="h4 mb-3"), no_sweeps_state()])
    selected = sweep_id if sweep_id in sweep_ids else sweep_ids[0]
    return html.Div(
        [
            html.H2("Cap sweeps", className="h4 mb-3"),
            dcc.Dropdown(
                id="sweep-select",
                options=sweep_ids,
                value=selected,
                clearable=False,
                className="mb-3 sweep-select",
            ),
            html.Div(id="sweep-summary"),
            dbc.Card(
                dbc.CardBody(dcc.Graph(id="sweep-graph", config={"displaylogo": False})),
                className="mb-3",
            ),
            html.Div(id="sweep-table"),
        ]
    )


def register(app: dash.Dash, config: DashboardConfig) -> None:
    """Register ``/sweeps`` and the callback that draws the selected sweep."""
    dash.register_page(
        __name__,
        path="/sweeps",
        name="Sweeps",
        title="Cap sweeps · tpmledger",
        order=2,
        layout=partial(layout, config),
    )

    @app.callback(
        Output("sweep-graph", "figure"),
        Output("sweep-summary", "children"),
        Output("sweep-table", "children"),
        Input("sweep-select", "value"),
    )
    def draw_sweep(sweep_id: str | None) -> tuple[Figure, Any, Any]:
        return sweep_panels(config, sweep_id)
