"""`tpmledger up` survives SIGKILL of a service and of its embedded PostgreSQL."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.cli.test_up_command import OutputReader
from tests.fixtures.servers import free_port, wait_for

pytestmark = pytest.mark.slow

CLI = [sys.executable, "-P", "-m", "tpmledger.cli.main"]


def _service_pid(up: subprocess.Popen[str], service: str) -> int:
    """The pid of `up`'s child running ``serve SERVICE``."""
    for child in psutil.Process(up.pid).children():
        if child.cmdline()[-2:] == ["serve", service]:
            return int(child.pid)
    raise LookupError(service)


def _wait_text(out: OutputReader, text: str, timeout: float) -> None:
    try:
        wait_for(lambda: text in out.text, timeout=timeout, interval=0.2)
    except TimeoutError:
        raise AssertionError(f"{text!r} not printed by `tpmledger up`:\n{out.text}") from None


def _ready(url: str) -> bool:
    return httpx.get(f"{url}/readyz", timeout=2).status_code == 200


def _export(endpoint: str, run_id: str, count: int) -> None:
    resource = Resource.create({"tpmledger.run.id": run_id, "tpmledger.shard.id": "0"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"))
    )
    tracer = provider.get_tracer("test")
    for _ in range(count):
        with tracer.start_as_current_span("chat gpt-test") as span:
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute("gen_ai.usage.input_tokens", 100)
            span.set_attribute("gen_ai.usage.output_tokens", 20)
    provider.shutdown()


def test_up_restarts_a_killed_service_and_a_killed_postgres(tmp_path: Path) -> None:
    http_port, grpc_port, dash_port = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPMLEDGER_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    data_dir = tmp_path / "data"
    ports = ["--http-port", str(http_port), "--grpc-port", str(grpc_port)]
    up = subprocess.Popen(
        [*CLI, "up", "--data-dir", str(data_dir), *ports, "--dashboard-port", str(dash_port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = OutputReader(up)
    endpoint = f"http://127.0.0.1:{http_port}"
    try:
        _wait_text(out, "OTEL_EXPORTER_OTLP_ENDPOINT", timeout=120)

        # A service dies: it is started again, and `up` says so.
        killed = _service_pid(up, "ingest")
        os.kill(killed, signal.SIGKILL)
        _wait_text(out, "ingest restarted", timeout=60)
        assert "ingest was killed (SIGKILL); restarting it in 1 s" in out.text
        assert _service_pid(up, "ingest") != killed
        wait_for(lambda: _ready(endpoint), timeout=60, interval=0.2)

        # The embedded PostgreSQL dies: it is started again on the same socket.
        postmaster = data_dir / "postgres" / "postmaster.pid"
        dead = int(postmaster.read_text().split()[0])
        os.kill(dead, signal.SIGKILL)
        _wait_text(out, "the embedded PostgreSQL restarted", timeout=120)
        assert "the embedded PostgreSQL stopped; restarting it in 1 s" in out.text
        assert int(postmaster.read_text().split()[0]) != dead
        wait_for(lambda: _ready(endpoint), timeout=60, interval=0.2)

        # Spans sent after both kills are stored, and commands read them.
        _export(endpoint, "after_kills", 3)

        def stored() -> int:
            result = subprocess.run(
                [*CLI, "runs", "--json", "--data-dir", str(data_dir)],
                env=env, capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            runs = json.loads(result.stdout)["runs"]
            return sum(int(r["attempts"]) for r in runs if r["run_id"] == "after_kills")

        assert wait_for(lambda: stored() == 3, timeout=60, interval=0.5)
        assert up.poll() is None, out.text  # still running
    finally:
        up.send_signal(signal.SIGINT)
        code = up.wait(timeout=90)
    assert code == 0, out.text
    assert "giving up" not in out.text
    # The restarted server is stopped too when `up` ends.
    assert not (data_dir / "postgres" / "postmaster.pid").exists(), out.text


def _connect_embedded(data_dir: Path) -> Any:
    """A psycopg connection to ``up``'s embedded database (its socket, from postmaster.pid)."""
    import psycopg

    lines = (data_dir / "postgres" / "postmaster.pid").read_text().splitlines()
    return psycopg.connect(
        host=lines[4], port=int(lines[3]), user="postgres", dbname="tpmledger", autocommit=True
    )


def _processes_in(pgdata: Path) -> list[int]:
    found = []
    for process in psutil.process_iter():
        try:
            if process.cwd() == str(pgdata.resolve()):
                found.append(process.pid)
        except psutil.Error:
            continue
    return found


def test_up_restarts_postgres_killed_during_a_long_query_and_stops_it_after(
    tmp_path: Path,
) -> None:
    """Round-2 reproduction: the postmaster was killed while a backend ran a long query;
    every restart failed on the shared memory the orphaned backend held, and `up` gave up
    with the backend still running. And `up` once left PostgreSQL running after SIGTERM
    because a killed `tpmledger prune` had been attached to it."""
    http_port, grpc_port, dash_port = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPMLEDGER_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    data_dir = tmp_path / "data"
    pgdata = data_dir / "postgres"
    ports = ["--http-port", str(http_port), "--grpc-port", str(grpc_port)]
    up = subprocess.Popen(
        [*CLI, "up", "--data-dir", str(data_dir), *ports, "--dashboard-port", str(dash_port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = OutputReader(up)
    attached: subprocess.Popen[bytes] | None = None
    try:
        _wait_text(out, "OTEL_EXPORTER_OTLP_ENDPOINT", timeout=120)
        # A backend busy with a query that never waits on a latch (it does not notice
        # that its postmaster died).
        conn = _connect_embedded(data_dir)
        backend = conn.info.backend_pid
        query = threading.Thread(
            target=_ignore_errors,
            args=(conn.execute, "SELECT count(*) FROM generate_series(1, 10000000000)"),
            daemon=True,
        )
        query.start()
        wait_for(lambda: psutil.Process(backend).cpu_percent(0.2) > 10, timeout=30)
        dead = int((pgdata / "postmaster.pid").read_text().split()[0])
        os.kill(dead, signal.SIGKILL)
        _wait_text(out, "the embedded PostgreSQL restarted", timeout=120)
        assert not psutil.pid_exists(backend) or psutil.Process(backend).status() == "zombie"
        wait_for(lambda: _ready(f"http://127.0.0.1:{http_port}"), timeout=60, interval=0.2)

        # Another command attaches to the embedded server and is killed.
        attach = (
            "import sys, time; from pathlib import Path;"
            "from tpmledger.storage.server.embedded_postgres import EmbeddedPostgres;"
            "EmbeddedPostgres(Path(sys.argv[1])).start(); print('attached', flush=True);"
            "time.sleep(600)"
        )
        attached = subprocess.Popen(
            [sys.executable, "-c", attach, str(data_dir)], env=env, stdout=subprocess.PIPE
        )
        assert attached.stdout is not None and attached.stdout.readline() == b"attached\n"
        attached.kill()
        attached.wait()
        assert up.poll() is None, out.text
    finally:
        if attached is not None and attached.poll() is None:
            attached.kill()
        up.send_signal(signal.SIGTERM)
        code = up.wait(timeout=90)
    assert code == 0, out.text
    assert "giving up" not in out.text
    assert not (pgdata / "postmaster.pid").exists(), out.text
    assert _processes_in(pgdata) == []


def _ignore_errors(call: Any, *args: Any) -> None:
    with contextlib.suppress(Exception):
        call(*args)
