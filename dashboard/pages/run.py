"""Run page (``/runs/<run_id>``): KPIs, throughput versus stability, concurrency, TTFT,
shard balance and provenance of the latest sealed snapshot (SPEC §6).

Callbacks read one ``runs``/``snapshots`` row and the snapshot's minute rows only, so
they cost the same for a thousand attempts or a million. Live runs refresh on an interval
that switches itself off once the run is sealed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any
from urllib.parse import unquote

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, State, dcc, html

from dashboard.components.empty_states import not_sealed_yet, run_not_found
from dashboard.components.kpi_cards import run_kpi_cards
from dashboard.components.provenance_panel import provenance_panel
from dashboard.config import DashboardConfig
from dashboard.data.minute_series import load_run_minutes, load_shard_minutes
from dashboard.data.run_records import RunRecord, load_run
from dashboard.display import TOKEN_COLUMNS, fmt_utc
from dashboard.figures.chart_style import Figure, message_figure
from dashboard.figures.concurrency import (
    CONCURRENCY_COLUMNS,
    concurrency_figure,
    work_conserving_text,
)
from dashboard.figures.shard_balance import shard_balance_figure
from dashboard.figures.throughput import throughput_figure
from dashboard.figures.ttft import TTFT_COLUMNS, ttft_figure
from dashboard.pages.runs import status_badge

TOKEN_OPTIONS = [
    {"label": "Total (prompt + completion)", "value": "total"},
    {"label": "Prompt (input)", "value": "prompt"},
    {"label": "Completion (output)", "value": "completion"},
]


@dataclass
class RunPanels:
    """Everything the refresh callback writes, in its output order."""

    header: Any
    kpis: Any
    concurrency: Figure
    work_conserving: str
    ttft: Figure
    balance: Figure
    provenance: Any
    body_style: dict[str, str]
    refresh_disabled: bool

    def outputs(self) -> tuple[Any, ...]:
        return (
            self.header,
            self.kpis,
            self.concurrency,
            self.work_conserving,
            self.ttft,
            self.balance,
            self.provenance,
            self.body_style,
            self.refresh_disabled,
        )


def _header(run: RunRecord) -> html.Div:
    snap = run.snapshot
    as_of = (
        f"snapshot v{snap.version} · data as of {fmt_utc(snap.data_as_of, seconds=True)}"
        if snap
        else "no snapshot yet"
    )
    sweep: list[Any] = []
    if run.sweep_id:
        sweep = [" · sweep ", dcc.Link(run.sweep_id, href=f"/sweeps?sweep_id={run.sweep_id}")]
    first, last = fmt_utc(run.first_event_utc, True), fmt_utc(run.last_event_utc, True)
    return html.Div(
        [
            html.H2([run.run_id, " ", status_badge(run.status, "run-status")], className="h4 mb-1"),
            html.Div(
                [
                    f"{run.attempts:,} attempts · first event {first} · last event {last}"
                    f" · {as_of}",
                    *sweep,
                ],
                className="small text-body-secondary mb-3",
            ),
        ]
    )


def run_panels(config: DashboardConfig, run_id: str) -> RunPanels:
    """Server-side work of the refresh callback (also timed by ``bench/dashboard_callbacks.py``)."""
    run = load_run(config.database_url, run_id)
    hidden = {"display": "none"}
    empty = message_figure("")
    if run is None:
        return RunPanels(run_not_found(run_id), None, empty, "", empty, empty, None, hidden, True)
    if run.snapshot is None:
        header = html.Div([_header(run), not_sealed_yet(run_id)])
        return RunPanels(header, None, empty, "", empty, empty, None, hidden, False)
    minutes = load_run_minutes(
        config.database_url, run_id, run.snapshot.version, CONCURRENCY_COLUMNS + TTFT_COLUMNS
    )
    return RunPanels(
        header=_header(run),
        kpis=run_kpi_cards(run),
        concurrency=concurrency_figure(minutes),
        work_conserving=work_conserving_text(run.metrics),
        ttft=ttft_figure(minutes),
        balance=shard_balance_figure(run.metrics.get("shard_balance")),
        provenance=provenance_panel(run, config.api_base_url),
        body_style={},
        refresh_disabled=not run.is_live,
    )


def throughput_view(config: DashboardConfig, run_id: str, token_type: str) -> Figure:
    """Server-side work of the token-type switch: stacked shards plus the run's rates."""
    run = load_run(config.database_url, run_id)
    if run is None or run.snapshot is None:
        return message_figure("")
    if token_type not in TOKEN_COLUMNS:
        token_type = "total"
    version = run.snapshot.version
    shards = load_shard_minutes(config.database_url, run_id, version, (TOKEN_COLUMNS[token_type],))
    rates = load_run_minutes(config.database_url, run_id, version, ("retry_rate", "success_rate"))
    return throughput_figure(shards, rates, token_type, run.metrics)


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
        Output("run-refresh", "disabled"),
        Input("run-refresh", "n_intervals"),
        State("run-id", "data"),
    )
    def refresh_run(_n_intervals: int | None, run_id: str) -> tuple[Any, ...]:
        return run_panels(config, run_id).outputs()

    @app.callback(
        Output("run-throughput-graph", "figure"),
        Input("run-token-type", "value"),
        Input("run-refresh", "n_intervals"),
        State("run-id", "data"),
    )
    def switch_token_type(token_type: str, _n_intervals: int | None, run_id: str) -> Figure:
        return throughput_view(config, run_id, token_type)
