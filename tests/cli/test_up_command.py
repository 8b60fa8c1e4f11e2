"""`tpmledger up` as a new user runs it: embedded PostgreSQL, exporter lines, runs listed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.fixtures.servers import free_port, wait_for

pytestmark = pytest.mark.slow


class OutputReader:
    """Collects a child's stdout lines on a thread so the test can wait for text."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stdout is not None
        self._thread = threading.Thread(target=self._read, args=(proc.stdout,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line)

    @property
    def text(self) -> str:
        return "".join(self.lines)


def _env_line(text: str, name: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(f"export {name}="):
            return line.split("=", 1)[1]
    raise AssertionError(f"{name} not printed by `tpmledger up`:\n{text}")


def _shadowing_folders(where: Path) -> Path:
    """A directory holding folders named like tpmledger's packages that break on import."""
    for name in ("analytics", "ingest", "storage", "dashboard", "provenance", "read_api"):
        (where / name).mkdir(parents=True)
        (where / name / "__init__.py").write_text("raise ImportError('shadowed by the CWD')\n")
    return where


def test_up_on_embedded_postgres_then_exporter_then_runs(tmp_path: Path) -> None:
    http_port, grpc_port, dash_port = free_port(), free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPMLEDGER_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["XDG_STATE_HOME"] = str(tmp_path / "state")  # where `up` records its data dir
    data_dir = tmp_path / "data"
    # Started like the console script (no CWD on the path) from a directory full of
    # folders named like our packages: the services `up` starts must not import them.
    shadow = _shadowing_folders(tmp_path / "project")
    cli = [sys.executable, "-P", "-m", "tpmledger.cli.main"]
    ports = ["--http-port", str(http_port), "--grpc-port", str(grpc_port)]
    up = subprocess.Popen(
        [*cli, "up", "--data-dir", str(data_dir), *ports, "--dashboard-port", str(dash_port)],
        cwd=shadow,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out = OutputReader(up)
    try:
        wait_for(lambda: "OTEL_EXPORTER_OTLP_ENDPOINT" in out.text, timeout=120, interval=0.2)
        endpoint = _env_line(out.text, "OTEL_EXPORTER_OTLP_ENDPOINT")
        assert endpoint == f"http://127.0.0.1:{http_port}"
        # Quiet by default: no initdb transcript, no migration steps (-v shows them).
        assert "You can now start the database server" not in out.text
        assert "alembic" not in out.text

        resource = Resource.create(
            {"tpmledger.run.id": "first_run", "tpmledger.shard.id": "3", "service.name": "w"}
        )
        provider = TracerProvider(resource=resource)
        provider.add_span_processor(
            SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces"))
        )
        tracer = provider.get_tracer("test")
        for _ in range(3):
            with tracer.start_as_current_span("chat gpt-test") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
                span.set_attribute("gen_ai.usage.input_tokens", 120)
                span.set_attribute("gen_ai.usage.output_tokens", 30)
        provider.shutdown()

        def listed() -> list[dict[str, object]]:
            result = subprocess.run(
                [*cli, "runs", "--json", "--data-dir", str(data_dir)],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert result.returncode == 0, result.stderr
            return [r for r in json.loads(result.stdout)["runs"] if r["run_id"] == "first_run"]

        runs = wait_for(listed, timeout=30, interval=0.5)
        assert runs[0]["attempts"] == 3
        # Without --data-dir a command finds the running `up`'s database and names it.
        plain = subprocess.run(
            [*cli, "runs", "--json"], env=env, capture_output=True, text=True, timeout=60
        )
        assert [r["run_id"] for r in json.loads(plain.stdout)["runs"]] == ["first_run"]
        assert f"using the embedded database in {data_dir.resolve()}" in plain.stderr
        assert runs[0]["shard_count"] == 1
    finally:
        up.send_signal(signal.SIGINT)
        code = up.wait(timeout=60)
    assert code in (0, 130), out.text
    assert not (data_dir / "postgres" / "postmaster.pid").exists(), "embedded PostgreSQL left up"


def test_a_taken_port_is_named_before_anything_starts(tmp_path: Path) -> None:
    import socket

    env = {k: v for k, v in os.environ.items() if not k.startswith("TPMLEDGER_")}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "tpmledger.cli.main", "up", "--data-dir", str(tmp_path),
             "--http-port", str(port), "--grpc-port", str(free_port()),
             "--dashboard-port", str(free_port())],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert result.returncode == 2
    assert f"port {port}" in result.stderr and "--http-port" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "postgres").exists()  # nothing was started


def test_scrape_flags_join_the_configured_targets_and_are_checked() -> None:
    import argparse

    from tpmledger.cli.up_command import scrape_targets
    from tpmledger.settings import Settings

    configured = Settings(scrape_targets="http://gpu-1:8000/metrics")
    args = argparse.Namespace(scrape=["http://gpu-2:8000/metrics", "http://gpu-1:8000/metrics"])
    assert scrape_targets(args, configured) == [
        "http://gpu-1:8000/metrics",
        "http://gpu-2:8000/metrics",
    ]
    assert scrape_targets(argparse.Namespace(scrape=None), configured) == [
        "http://gpu-1:8000/metrics"
    ]
    with pytest.raises(ValueError, match="not an http"):
        scrape_targets(argparse.Namespace(scrape=["gpu-3:8000"]), configured)
