"""Runs page (``/``): every run with status, shards, attempts, peak TPM, rates, TTFT, seal."""

from __future__ import annotations

from functools import partial
from typing import Any
from urllib.parse import quote, urlencode

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, dcc, html

from tpmledger.dashboard.components.empty_states import no_runs_state
from tpmledger.dashboard.components.kpi_cards import NOT_YET
from tpmledger.dashboard.components.status_badge import freshness_text, status_badge
from tpmledger.dashboard.config import DashboardConfig
from tpmledger.dashboard.data.run_records import RunRecord, load_runs
from tpmledger.dashboard.display import (
    NOT_MEASURED,
    fmt_int,
    fmt_rate,
    fmt_seconds,
    fmt_utc,
    short_hash,
)
from tpmledger.storage.server.database import read_view

HEADERS = (
    "Run",
    "Status",
    "Shards",
    "Attempts",
    "Peak TPM (total)",
    "Success (attempts)",
    "Retry rate",
    "TTFT p95",
    "Latest seal",
    "First event (UTC)",
    "Last event (UTC)",
)


def run_href(run_id: str) -> str:
    """The run page's path for ``run_id`` (URL-quoted: run ids may hold any character)."""
    return f"/runs/{quote(run_id, safe='')}"


def sweep_href(sweep_id: str) -> str:
    """The sweep page's address for ``sweep_id`` (query-encoded: ``&``, ``#``, ``+`` and
    spaces in a sweep id must reach the page as they are)."""
    return f"/sweeps?{urlencode({'sweep_id': sweep_id})}"


def _cell(value: str) -> html.Td:
    muted = value in (NOT_MEASURED, NOT_YET, "computing", "not sealed")
    return html.Td(value, className="text-body-secondary" if muted else None)


def _row(run: RunRecord) -> html.Tr:
    m = run.metrics
    peak = m.get("peak_minute") or {}
    shards = str(run.observed_shards)
    if run.declared_shard_count is not None and run.declared_shard_count != run.observed_shards:
        shards += f" of {run.declared_shard_count}"
    seal = run.snapshot.seal if run.snapshot else None
    pending = "computing" if run.is_live else "not sealed"

    def shown(text: str) -> str:
        if not m:
            return pending  # no figure computed yet
        return NOT_YET if run.is_live and text == NOT_MEASURED else text

    peak_text = fmt_int(peak.get("tpm_total")) if m else pending
    if run.is_live and m and not peak and m.get("attempts"):
        peak_text = "first minutes in progress"  # peaks come from closed minutes only
    status = [status_badge(run.status)]
    if run.is_live:
        status.append(html.Div(freshness_text(run.data_as_of), className="small runs-freshness"))
    return html.Tr(
        [
            html.Td(dcc.Link(run.run_id, href=run_href(run.run_id), className="run-link")),
            html.Td(status),
            html.Td(shards),
            html.Td(f"{run.attempts:,}"),
            html.Td(
                [peak_text, html.Div(fmt_utc(peak.get("minute_utc")), className="small")]
                if peak
                else peak_text
            ),
            # Success and retry rates are exact live; run-level TTFT is sketched (±1 %).
            _cell(fmt_rate(m.get("attempt_success_rate")) if m else pending),
            _cell(fmt_rate(m.get("retry_rate")) if m else pending),
            _cell(shown(fmt_seconds((m.get("ttft_s") or {}).get("p95")))),
            html.Td(html.Code(short_hash(seal), title=seal or "not sealed yet")),
            html.Td(fmt_utc(run.first_event_utc, seconds=True), className="small"),
            html.Td(fmt_utc(run.last_event_utc, seconds=True), className="small"),
        ],
        id={"type": "runs-row", "run": run.run_id},
    )


def runs_table_view(config: DashboardConfig) -> Any:
    """The runs table (or the empty state with the exporter environment lines)."""
    with read_view(config.database_url) as session:
        runs = load_runs(session, config.close_after_s)
    if not runs:
        return no_runs_state(config.api_base_url)
    return dbc.Table(
        [
            html.Thead(html.Tr([html.Th(h) for h in HEADERS])),
            html.Tbody([_row(r) for r in runs]),
        ],
        hover=True,
        responsive=True,
        size="sm",
        className="align-middle",
        id="runs-table-grid",
    )


def layout(config: DashboardConfig, **_query: Any) -> html.Div:
    """Skeleton; the table is filled (and refreshed) by :func:`runs_table_view`."""
    return html.Div(
        [
            html.H2("Runs", className="h4 mb-3"),
            dcc.Interval(id="runs-refresh", interval=max(config.refresh_ms, 2_000) * 2),
            dcc.Loading(html.Div(id="runs-table"), delay_show=300),
        ]
    )


def register(app: dash.Dash, config: DashboardConfig) -> None:
    """Register the page at ``/`` and its refresh callback."""
    dash.register_page(
        __name__,
        path="/",
        name="Runs",
        title="Runs · tpmledger",
        order=0,
        layout=partial(layout, config),
    )

    # The interval pauses while the table is read: a tick during a slow read would make Dash
    # drop that read's answer (the run page does the same: pages/run.py).
    @app.callback(
        Output("runs-table", "children"),
        Input("runs-refresh", "n_intervals"),
        running=[(Output("runs-refresh", "disabled"), True, False)],
    )
    def refresh_runs(_n_intervals: int | None) -> Any:
        return runs_table_view(config)
