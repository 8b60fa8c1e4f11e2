"""``tpmledger serve ingest|analytics|dashboard``: one service per process (compose uses this)."""

from __future__ import annotations

import argparse
import importlib
import os
from typing import Any

from tpmledger.cli.database_option import add_data_dir_option, database, settings_from_args

# service name -> module whose ``run(settings)`` blocks until the process is told to stop
SERVICES = {
    "ingest": "tpmledger.ingest.service",
    "analytics": "tpmledger.analytics.worker",
    "dashboard": "tpmledger.dashboard.app",
}


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run one service in the foreground (ingest, analytics or dashboard)",
        description="Run one tpmledger service as its own process. ingest: OTLP/HTTP on "
        "--http-port (with the read API) and OTLP/gRPC on --grpc-port. analytics: reseals "
        "runs that received new data. dashboard: the Dash app on --dashboard-port.",
    )
    p.add_argument("service", choices=sorted(SERVICES), help="which service to run")
    add_data_dir_option(p)
    add_listener_options(p)
    p.set_defaults(func=run_serve)


def add_listener_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=None, help="bind address (default 127.0.0.1)")
    p.add_argument("--http-port", type=int, default=None, help="OTLP/HTTP port (default 4318)")
    p.add_argument("--grpc-port", type=int, default=None, help="OTLP/gRPC port (default 4317)")
    p.add_argument("--dashboard-port", type=int, default=None, help="dashboard (default 8050)")
    p.add_argument(
        "--insecure",
        action="store_true",
        default=None,
        help="allow a non-loopback bind with no ingest token configured",
    )


def listener_overrides(args: argparse.Namespace) -> dict[str, object]:
    return {
        "host": args.host,
        "http_port": args.http_port,
        "grpc_port": args.grpc_port,
        "dashboard_port": args.dashboard_port,
        "insecure": args.insecure,
    }


def run_serve(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, follow_running=False, **listener_overrides(args))
    # PostgreSQL names each connection's service (pg_stat_activity.application_name), so
    # an operator or a benchmark can tell ingest's backends from the analytics worker's.
    os.environ.setdefault("PGAPPNAME", f"tpmledger-{args.service}")
    service = importlib.import_module(SERVICES[args.service])
    with database(settings, create=True) as url:
        service.run(settings.model_copy(update={"database_url": url}))
    return 0
