"""`tpmledger up` survives SIGKILL of a service and of its embedded PostgreSQL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

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
