"""Server-side work of the run page's callbacks, kept apart from its layout.

Each function reads one ``runs``/``snapshots`` row and minute rows only (the snapshot's,
or for a live run the live minute table over them), so it costs the same for a thousand
attempts or a million; ``bench/dashboard_callbacks.py`` times them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import dash_bootstrap_components as dbc
from dash import dcc, html
from sqlalchemy.orm import Session

from tpmledger.analytics.kernels.run_span_limit import RunTooLong
from tpmledger.analytics.verdicts.bottleneck import current_bottleneck
from tpmledger.analytics.views.current_table import CurrentTable, current_table
from tpmledger.analytics.views.live_view import live_figures
from tpmledger.analytics.views.run_extras import (
    live_run_diagnostics,
    reconciliation,
    run_extras,
)
from tpmledger.analytics.views.token_parts import run_token_parts
from tpmledger.dashboard.components.bottleneck_panel import bottleneck_panel
from tpmledger.dashboard.components.diagnostics_panel import diagnostics_panel
from tpmledger.dashboard.components.empty_states import (
    live_waiting,
    provenance_pending,
    run_not_found,
)
from tpmledger.dashboard.components.kpi_cards import run_kpi_cards
from tpmledger.dashboard.components.provenance_panel import provenance_panel
from tpmledger.dashboard.components.reconciliation_line import reconciliation_line
from tpmledger.dashboard.components.status_badge import freshness_line, status_badge
from tpmledger.dashboard.config import DashboardConfig
from tpmledger.dashboard.data.minute_series import (
    MinuteSeries,
    load_run_minutes,
    load_shard_minutes,
    series_from_rows,
    shard_series_from_rows,
)
from tpmledger.dashboard.data.run_records import RunRecord, load_run
from tpmledger.dashboard.display import TOKEN_COLUMNS, fmt_utc
from tpmledger.dashboard.figures.chart_style import Figure, message_figure
from tpmledger.dashboard.figures.concurrency import (
    CONCURRENCY_COLUMNS,
    concurrency_figure,
    work_conserving_text,
)
from tpmledger.dashboard.figures.quota import dashboard_minute, headroom_lines, quota_figure
from tpmledger.dashboard.figures.serving import SERVING_CLIENT_COLUMNS, serving_figure
from tpmledger.dashboard.figures.shard_balance import shard_balance_figure
from tpmledger.dashboard.figures.throughput import throughput_figure
from tpmledger.dashboard.figures.ttft import TTFT_COLUMNS, ttft_figure
from tpmledger.dashboard.pages.runs import sweep_href
from tpmledger.storage.readers.server_minutes_read import run_models, server_minutes
from tpmledger.storage.readers.target_minutes import target_minutes
from tpmledger.storage.schema.minute_keys import WHOLE_RUN
from tpmledger.storage.server.database import read_view


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
    if run.is_live:
        sealed = f"latest sealed snapshot v{snap.version}" if snap else "not sealed yet"
        as_of = f"live figures (provisional) · {sealed}"
    elif snap:
        as_of = f"snapshot v{snap.version} · data as of {fmt_utc(snap.data_as_of, seconds=True)}"
    else:
        as_of = "no snapshot yet"
    sweep: list[Any] = []
    if run.sweep_id:
        sweep = [" · sweep ", dcc.Link(run.sweep_id, href=sweep_href(run.sweep_id))]
    first, last = fmt_utc(run.first_event_utc, True), fmt_utc(run.last_event_utc, True)
    return html.Div(
        [
            html.H2([run.run_id, " ", status_badge(run.status, "run-status")], className="h4 mb-1"),
            freshness_line(run.status, run.data_as_of, "run-freshness"),
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


def _live(
    session: Session, config: DashboardConfig, run: RunRecord
) -> tuple[RunRecord, CurrentTable | None]:
    """A live run with its live figures, and its current minute table (read once)."""
    table = current_table(session, run.run_id, close_after_s=config.close_after_s)
    if table is None or not table.minutes:
        return replace(run, metrics={}, data_as_of=None), None
    return replace(run, metrics=live_figures(table), data_as_of=table.data_as_of), table


def _whole_run_minutes(
    session: Session, run: RunRecord, table: CurrentTable | None, columns: tuple[str, ...]
) -> MinuteSeries:
    if table is not None:
        return series_from_rows(table.shard_rows(WHOLE_RUN), columns)
    assert run.snapshot is not None
    return load_run_minutes(session, run.run_id, run.snapshot.version, columns)


def run_panels(config: DashboardConfig, run_id: str) -> RunPanels:
    """Server-side work of the refresh callback (also timed by ``bench/dashboard_callbacks.py``):
    every panel from one snapshot of the database."""
    with read_view(config.database_url) as session:
        return _run_panels(session, config, run_id)


def _run_panels(session: Session, config: DashboardConfig, run_id: str) -> RunPanels:
    # A NUL byte cannot name a stored run (and PostgreSQL refuses it in a query).
    run = None if "\x00" in run_id else load_run(session, run_id, live_figures=False)
    hidden = {"display": "none"}
    empty = message_figure("")
    if run is None:
        return RunPanels(run_not_found(run_id), None, empty, "", empty, empty, None, hidden, True)
    table = None
    if run.is_live and not run.covered:
        try:
            run, table = _live(session, config, run)
        except RunTooLong as exc:
            header = html.Div(
                [_header(run), dbc.Alert(str(exc), color="warning", id="run-too-long")]
            )
            return RunPanels(header, None, empty, "", empty, empty, None, hidden, True)
        if table is None:
            header = html.Div([_header(run), live_waiting(run_id)])
            return RunPanels(header, None, empty, "", empty, empty, None, hidden, False)
    columns = tuple(dict.fromkeys(CONCURRENCY_COLUMNS + TTFT_COLUMNS + SERVING_CLIENT_COLUMNS))
    minutes = _whole_run_minutes(session, run, table, columns)
    checked = reconciliation(session, run.run_id, run.metrics.get("tokens"))
    version = run.snapshot.version if run.snapshot is not None else None
    extras = run_extras(session, run.run_id, version, config.slo_text)
    if table is not None and isinstance(run.metrics.get("diagnostics"), dict):
        extras["diagnostics"] = live_run_diagnostics(run.metrics["diagnostics"], version)
    targets = target_minutes(session, [run.run_id])  # docs/metrics.md#quota-headroom
    open_minutes = {dashboard_minute(m) for m in run.metrics.get("open_minutes") or []}
    verdict = run.metrics.get("bottleneck") or current_bottleneck(
        session, run.run_id, close_after_s=config.close_after_s, table=table, targets=targets
    )
    # docs/metrics.md#serving-side-metrics: the servers beside the client, one time axis.
    servers = server_minutes(session, run.run_id, run_models(targets))
    open_minutes = {dashboard_minute(m) for m in run.metrics.get("open_minutes") or []}
    return RunPanels(
        header=html.Div(
            [
                _header(run),
                reconciliation_line(checked),
                bottleneck_panel(verdict, run.attempts),
                dcc.Graph(id="run-quota", figure=quota_figure(targets, open_minutes)),
                html.Ul(
                    [html.Li(line) for line in headroom_lines(targets, open_minutes)],
                    id="run-quota-headroom",
                    className="small mb-3",
                ),
                dcc.Graph(id="run-serving", figure=serving_figure(minutes, servers, open_minutes)),
                diagnostics_panel({**run.metrics, **extras}),
            ]
        ),
        kpis=run_kpi_cards(run, run_token_parts(session, run.run_id)),
        concurrency=concurrency_figure(minutes),
        work_conserving=work_conserving_text(
            run.metrics, live_since_seal=run.is_live and run.snapshot is not None
        ),
        ttft=ttft_figure(minutes),
        balance=shard_balance_figure(run.metrics.get("shard_balance")),
        provenance=provenance_panel(run, config.api_base_url)
        if run.snapshot
        else provenance_pending(),
        body_style={},
        refresh_disabled=not run.is_live,
    )


def throughput_view(config: DashboardConfig, run_id: str, token_type: str) -> Figure:
    """Server-side work of the token-type switch: stacked shards plus the run's rates."""
    with read_view(config.database_url) as session:
        return _throughput_view(session, config, run_id, token_type)


def _throughput_view(
    session: Session, config: DashboardConfig, run_id: str, token_type: str
) -> Figure:
    run = None if "\x00" in run_id else load_run(session, run_id, live_figures=False)
    if run is None:
        return message_figure("")
    if token_type not in TOKEN_COLUMNS:
        token_type = "total"
    column = TOKEN_COLUMNS[token_type]
    if run.is_live and not run.covered:
        try:
            run, table = _live(session, config, run)
        except RunTooLong:
            return message_figure("")
        if table is None:
            return message_figure("")
        shards = shard_series_from_rows(table.rows, (column,))
        rates = series_from_rows(table.shard_rows(WHOLE_RUN), ("retry_rate", "success_rate"))
        return throughput_figure(shards, rates, token_type, run.metrics)
    if run.snapshot is None:
        return message_figure("")
    version = run.snapshot.version
    shards = load_shard_minutes(session, run_id, version, (column,))
    rates = load_run_minutes(session, run_id, version, ("retry_rate", "success_rate"))
    return throughput_figure(shards, rates, token_type, run.metrics)
