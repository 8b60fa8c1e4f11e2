"""``tpmledger up``: every service in one terminal, on the embedded PostgreSQL by default."""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any

from tpmledger.cli.database_option import (
    add_data_dir_option,
    clear_running,
    database_in_use,
    record_running,
    settings_from_args,
)
from tpmledger.cli.serve_command import add_listener_options, listener_overrides
from tpmledger.cli.supervision import ChildProcess, GaveUp, Part, Supervisor

if TYPE_CHECKING:
    from tpmledger.settings import Settings
    from tpmledger.storage.server.embedded_postgres import EmbeddedPostgres


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "up",
        help="run everything (database, migrations, ingest, analytics, dashboard)",
        description="Start PostgreSQL (embedded unless TPMLEDGER_DATABASE_URL is set), migrate, "
        "then run ingest, the analytics worker and the dashboard as child processes. A "
        "service (or the embedded PostgreSQL) that dies is restarted with backoff; up stops "
        "only when restarts keep failing. Ctrl-C stops them all.",
    )
    add_data_dir_option(p)
    add_listener_options(p)
    p.add_argument(
        "--demo",
        action="store_true",
        help="also run a short simulated 8-shard fleet (a quota-bound run, a serving-bound "
        "one whose simulated vLLM metrics ingest scrapes, and a small cap sweep)",
    )
    p.add_argument(
        "--scrape",
        action="append",
        metavar="URL",
        default=None,
        help="a vLLM / SGLang Prometheus endpoint for ingest to scrape (repeatable; added to "
        "TPMLEDGER_SCRAPE_TARGETS), e.g. http://gpu-1:8000/metrics",
    )
    p.set_defaults(func=run_up)


def exporter_lines(settings: Settings) -> str:
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
    return "\n".join(
        [
            "Point your shard workers at tpmledger (no code change):",
            f"  export OTEL_EXPORTER_OTLP_ENDPOINT=http://{host}:{settings.http_port}",
            "  export OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf"
            f"   # or grpc, on http://{host}:{settings.grpc_port}",
            "  export OTEL_RESOURCE_ATTRIBUTES=tpmledger.run.id=my_run,"
            "tpmledger.shard.id=0,tpmledger.shard.count=8,tpmledger.concurrency.cap=16",
            "  # tpmledger.shard.id must differ per worker (0, 1, … 7 here): workers that share"
            " one are counted as one shard",
            f"Dashboard: http://{host}:{settings.dashboard_port}",
            f"Read API:  http://{host}:{settings.http_port}/v1/runs",
        ]
    )


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> bool:
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=1) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        time.sleep(0.2)
    return False


# Which flag moves each listener (named when its port is taken).
_PORT_FLAGS = (
    ("http_port", "--http-port", "OTLP/HTTP and the read API"),
    ("grpc_port", "--grpc-port", "OTLP/gRPC"),
    ("dashboard_port", "--dashboard-port", "the dashboard"),
)


def busy_port(settings: Settings) -> str | None:
    """A one-line message naming the first listener port already taken, or ``None``.

    Checked before anything starts, so a taken port ends with this line instead of a
    service's traceback after the banner.
    """
    for field, flag, role in _PORT_FLAGS:
        port = int(getattr(settings, field))
        with socket.socket(socket.AF_INET6 if ":" in settings.host else socket.AF_INET) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((settings.host, port))
            except OSError as exc:
                return (
                    f"error: port {port} on {settings.host} ({role}) is not free ({exc.strerror}); "
                    f"choose another with {flag} PORT"
                )
    return None


def _free_port() -> int:
    """A port free now on loopback, for the demo's simulated server."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EmbeddedDatabase:
    """The embedded PostgreSQL as a part ``up`` supervises."""

    name = "the embedded PostgreSQL"

    def __init__(self, server: EmbeddedPostgres) -> None:
        self._server = server

    def alive(self) -> bool:
        return self._server.is_running()

    def how_it_ended(self) -> str:
        return "stopped"

    def restart(self) -> None:
        self._server.restart()


def scrape_targets(args: argparse.Namespace, settings: Settings) -> list[str]:
    """TPMLEDGER_SCRAPE_TARGETS and every ``--scrape URL``, checked as the settings are."""
    extra = getattr(args, "scrape", None) or []
    if not extra:
        return list(settings.scrape_targets)
    from tpmledger.settings import Settings  # imported when up runs (--help stays quick)

    merged = Settings.model_validate({"scrape_targets": [*settings.scrape_targets, *extra]})
    return list(dict.fromkeys(merged.scrape_targets))


def run_up(args: argparse.Namespace) -> int:
    settings = settings_from_args(args, follow_running=False, **listener_overrides(args))
    try:
        targets = scrape_targets(args, settings)
    except ValueError as exc:  # pydantic's ValidationError is one
        line = str(exc).splitlines()[-2].strip().split(" [type=")[0]
        print(f"error: {line.removeprefix('Value error, ')}", file=sys.stderr)
        return 2
    problem = busy_port(settings)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    services: list[ChildProcess] = []
    demo: subprocess.Popen[bytes] | None = None
    stopping = False

    def request_stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    # Both signals, explicitly: a shell that starts `up` in the background ignores SIGINT
    # for it, and Python then never raises KeyboardInterrupt.
    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    with database_in_use(settings, create=True) as db:
        env = {
            **os.environ,
            "TPMLEDGER_DATABASE_URL": db.url,
            "TPMLEDGER_DATA_DIR": str(settings.data_dir),
            "TPMLEDGER_HOST": settings.host,
            "TPMLEDGER_HTTP_PORT": str(settings.http_port),
            "TPMLEDGER_GRPC_PORT": str(settings.grpc_port),
            "TPMLEDGER_DASHBOARD_PORT": str(settings.dashboard_port),
        }
        if settings.insecure:
            env["TPMLEDGER_INSECURE"] = "true"
        demo_port = _free_port() if args.demo else None
        if demo_port is not None:
            # The demo's simulated server exposes vLLM's metrics; ingest scrapes them.
            targets = [*targets, f"http://127.0.0.1:{demo_port}/metrics"]
        if targets:
            env["TPMLEDGER_SCRAPE_TARGETS"] = ",".join(targets)
        # -P: the current directory is not put on the children's import path, so a
        # folder named like one of our packages (analytics/, storage/…) cannot shadow it.
        command = [sys.executable, "-P", "-m", "tpmledger.cli.main"]
        if getattr(args, "verbose", False):
            command.append("-v")
        try:
            for service in ("ingest", "analytics", "dashboard"):
                services.append(ChildProcess(service, [*command, "serve", service], env))
            host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host
            ingest_url = f"http://{host}:{settings.http_port}"
            if not _wait_ready(f"{ingest_url}/readyz", services[0].process):
                print("ingest did not become ready; see the log above", file=sys.stderr)
                return 1
            if not settings.database_url:
                record_running(settings.data_dir)  # other commands find this database
            print("\n" + exporter_lines(settings) + "\n", flush=True)
            if args.demo:
                port = ["--server-port", str(demo_port)]
                demo = subprocess.Popen(
                    [*command, "simulate", "--demo", "--endpoint", ingest_url, *port]
                )
            parts: list[Part] = list(services)
            if db.embedded is not None:
                parts.insert(0, EmbeddedDatabase(db.embedded))
            supervisor = Supervisor(parts)
            while not stopping:
                supervisor.poll()
                time.sleep(0.5)
        except GaveUp as exc:
            print(str(exc), file=sys.stderr, flush=True)
            return 1
        except KeyboardInterrupt:
            pass
        finally:
            clear_running(settings.data_dir)
            _stop_children(([demo] if demo else []), [s.process for s in services])
    return 0


def _stop_children(
    senders: list[subprocess.Popen[bytes]], services: list[subprocess.Popen[bytes]]
) -> None:
    """Stop the demo fleet first (its last spans still reach ingest), then the services."""
    for group in (senders, services):
        for proc in group:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 40
        for proc in group:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
