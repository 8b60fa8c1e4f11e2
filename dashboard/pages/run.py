"""Run page (``/runs/<run_id>``): KPIs, throughput versus stability, concurrency, TTFT,
shard balance and provenance of the latest sealed snapshot (docs/dashboard.md).

Callbacks read one ``runs``/``snapshots`` row and the snapshot's minute rows only, so
they cost the same for a thousand attempts or a million. Live runs refresh on an interval
that switches itself off once the run is sealed.

The interval is paused while a refresh runs (:data:`PAUSE_WHILE_RUNNING`): Dash drops a
callback's pending answer when the same callback is asked again, so ticks that came faster
than a refresh could answer (a slow or busy server) kept the page empty for good.
"""

from __future__ import annotations

from functools import partial
from typing import Any
from urllib.parse import unquote

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, dcc, html

from tpmledger.dashboard.config import DashboardConfig
from tpmledger.dashboard.figures.chart_style import Figure
from tpmledger.dashboard.pages.run_panels import run_panels, throughput_view

#: While a refresh callback runs, the interval does not tick; it ticks again (a whole
#: interval later) when the callback has answered.
PAUSE_WHILE_RUNNING = [(Output("run-refresh", "disabled"), True, False)]

TOKEN_OPTIONS = [
    {"label": "Total (prompt + completion)", "value": "total"},
    {"label": "Prompt (input)", "value": "prompt"},
    {"label": "Completion (output)", "value": "completion"},
]


def _card(title: Any, body: Any, card_id: str) -> dbc.Card:
    return dbc.Card([dbc.CardHeader(title), dbc.CardBody(body)], className="mb-3 h-100", id=card_id)


def _graph(graph_id: str) -> dcc.Graph:
    return dcc.Graph(
        id=graph_id, config={"displaylogo": False, "displayModeBar": "hover"}, className="run-graph"
    )


def layout(config: DashboardConfig, run_id: str | None = None, **_query: Any) -> html.Div:
    """Skeleton with the run id in a store; callbacks fill it from the tables."""
    run_id = unquote(run_id or "")
    switch = dbc.RadioItems(
        id="run-token-type",
        options=TOKEN_OPTIONS,
        value="total",
        inline=True,
        className="small",
        inputClassName="me-1",
    )
    body = html.Div(
        [
            html.Div(id="run-kpis", className="mb-2"),
            _card(
                html.Div(
                    [
                        html.Span(
                            "Throughput versus stability (TPM by shard, rates)", className="me-3"
                        ),
                        switch,
                    ],
                    className="d-flex flex-wrap align-items-center",
                ),
                _graph("run-throughput-graph"),
                "run-throughput-card",
            ),
            dbc.Row(
                [
                    dbc.Col(
                        _card(
                            "In-flight versus cap, queue depth",
                            [
                                _graph("run-concurrency-graph"),
                                html.Div(id="run-work-conserving", className="small"),
                            ],
                            "run-concurrency-card",
                        ),
                        lg=6,
                        className="mb-3",
                    ),
                    dbc.Col(
                        _card(
                            "TTFT per minute (p50 / p95 / p99)",
                            _graph("run-ttft-graph"),
                            "run-ttft-card",
                        ),
                        lg=6,
                        className="mb-3",
                    ),
                ]
            ),
            dbc.Row(
                [
                    dbc.Col(
                        _card(
                            "Shard balance (share of total tokens)",
                            _graph("run-balance-graph"),
                            "run-balance-card",
                        ),
                        lg=5,
                        className="mb-3",
                    ),
                    dbc.Col(
                        _card(
                            "Provenance of the latest sealed snapshot",
                            html.Div(id="run-provenance-panel"),
                            "run-provenance-card",
                        ),
                        lg=7,
                        className="mb-3",
                    ),
                ]
            ),
        ],
        id="run-body",
    )
    return html.Div(
        [
            dcc.Store(id="run-id", data=run_id),
            # Written by each refresh of the panels; the throughput graph follows it, so one
            # tick asks the server one thing at a time.
            dcc.Store(id="run-refreshed"),
            dcc.Interval(id="run-refresh", interval=config.refresh_ms),
            html.Div(id="run-header"),
            body,
        ]
    )


def _title(run_id: str | None = None) -> str:
    return f"{unquote(run_id or '')} · tpmledger"


def register(app: dash.Dash, config: DashboardConfig) -> None:
    """Register ``/runs/<run_id>`` and its two callbacks (refresh, token-type switch)."""
    dash.register_page(
        __name__,
        path_template="/runs/<run_id>",
        name="Run",
        title=_title,
        order=1,
        layout=partial(layout, config),
    )

    @app.callback(
        Output("run-header", "children"),
        Output("run-kpis", "children"),
        Output("run-concurrency-graph", "figure"),
        Output("run-work-conserving", "children"),
        Output("run-ttft-graph", "figure"),
        Output("run-balance-graph", "figure"),
        Output("run-provenance-panel", "children"),
        Output("run-body", "style"),
        # 0: no more ticks (a sealed run, or none by that id); -1: keep refreshing.
        Output("run-refresh", "max_intervals"),
        Output("run-refreshed", "data"),
        Input("run-refresh", "n_intervals"),
        State("run-id", "data"),
        running=PAUSE_WHILE_RUNNING,
    )
    def refresh_run(n_intervals: int | None, run_id: str) -> tuple[Any, ...]:
        *panels, refresh_disabled = run_panels(config, run_id).outputs()
        return (*panels, 0 if refresh_disabled else -1, n_intervals or 0)

    @app.callback(
        Output("run-throughput-graph", "figure"),
        Input("run-token-type", "value"),
        Input("run-refreshed", "data"),
        State("run-id", "data"),
        running=PAUSE_WHILE_RUNNING,
        # Drawn after each refresh of the panels (or a switch), never beside one: a tick
        # ending this callback's pause while the refresh still ran would drop the refresh.
        prevent_initial_call=True,
    )
    def switch_token_type(token_type: str, _refreshed: int | None, run_id: str) -> Figure:
        return throughput_view(config, run_id, token_type)
