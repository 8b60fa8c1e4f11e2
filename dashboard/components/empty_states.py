"""What a page says when there is nothing to show yet, and what to do about it."""

from __future__ import annotations

import dash_bootstrap_components as dbc
from dash import dcc, html


def exporter_lines(api_base_url: str) -> str:
    """The environment a shard worker needs to send spans here, no code change (README.md)."""
    return "\n".join(
        [
            f"export OTEL_EXPORTER_OTLP_ENDPOINT={api_base_url}",
            "export OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
            "export OTEL_RESOURCE_ATTRIBUTES=tpmledger.run.id=my_run,tpmledger.shard.id=0,"
            "tpmledger.shard.count=8,tpmledger.concurrency.cap=16",
        ]
    )


def no_runs_state(api_base_url: str) -> dbc.Alert:
    """The runs page before any span arrived: how to point exporters here."""
    return dbc.Alert(
        [
            html.H5("No runs yet", className="alert-heading"),
            html.P(
                "Point your shard workers' OpenTelemetry exporters at tpmledger; runs appear "
                "here as soon as their first spans are stored. Set, per worker:"
            ),
            html.Pre(exporter_lines(api_base_url), id="runs-empty-env", className="mb-2"),
            html.P(
                ["Or try it with simulated data: ", html.Code("tpmledger up --demo"), "."],
                className="mb-0",
            ),
        ],
        color="info",
        id="runs-empty",
    )


def run_not_found(run_id: str) -> dbc.Alert:
    """A run id ingest never saw."""
    return dbc.Alert(
        [
            html.H5(f"No run named {run_id!r}", className="alert-heading"),
            dcc.Link("Back to all runs", href="/"),
        ],
        color="warning",
        id="run-not-found",
    )


def live_waiting(run_id: str) -> dbc.Alert:
    """A live run whose first minutes the analytics worker has not computed yet."""
    return dbc.Alert(
        f"Run {run_id} is receiving spans; its first live figures appear within seconds "
        "(the analytics worker computes the minutes new spans touch). This page refreshes "
        "on its own.",
        color="secondary",
        id="run-live-waiting",
    )


def provenance_pending() -> html.Div:
    """The provenance card of a run that was never sealed."""
    return html.Div(
        "Not sealed yet: the figures above are live and provisional. The analytics worker "
        "seals the run (event file digest, Merkle root, signed summary) once it is quiet; "
        "`tpmledger analyze RUN` seals it now.",
        id="run-provenance-pending",
        className="small text-body-secondary",
    )


def no_sweeps_state() -> dbc.Alert:
    """The sweep page when no run declared ``tpmledger.sweep.id``."""
    return dbc.Alert(
        [
            html.H5("No cap sweeps yet", className="alert-heading"),
            html.P(
                "A sweep is a set of runs at different concurrency caps sharing one sweep id. "
                "Add to each run's resource attributes:"
            ),
            html.Pre(
                "tpmledger.sweep.id=my_sweep,tpmledger.concurrency.cap=<cap of this run>",
                className="mb-0",
            ),
        ],
        color="info",
        id="sweep-empty",
    )
