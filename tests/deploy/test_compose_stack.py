"""docker-compose.yml run for real: `scripts/compose-local.sh up` on this machine's Docker.

The stack is the project's unchanged compose file, with images built from local parts (see
the script), a test project folder holding .env and secrets/ as docs/deployment.md tells a
user to make them, and free host ports. Every check goes through what compose publishes:
OTLP over HTTP and gRPC from the real SDK exporters, the read API, the dashboard, `docker
compose exec/restart/down/up`. When any test here fails, every container's log is kept under
test-output/compose-logs/.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter

from tests.deploy.conftest import FAILED, SCRIPT
from tests.fixtures.fault_servers import ExportLoad, batches, llm_spans
from tests.fixtures.servers import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "test-output" / "compose-logs"
TOKEN = "compose-stack-token-0123456789abcdef"
SERVICE_UID = 10001  # the image's service user (Dockerfile)

pytestmark = [pytest.mark.compose, pytest.mark.slow]


@dataclass
class Stack:
    project_dir: Path
    env: dict[str, str]
    http_port: int
    grpc_port: int
    dashboard_port: int
    runs_sent: dict[str, list[ReadableSpan]] = field(default_factory=dict)

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {TOKEN}"}

    def script(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            ["bash", str(SCRIPT), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, f"compose-local.sh {' '.join(args)}:\n{done.stderr[-4000:]}"
        return done

    def compose(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return self.script("compose", *args, timeout=timeout)

    def get(self, path: str) -> Any:
        answer = httpx.get(f"{self.api}{path}", headers=self.auth, timeout=30)
        answer.raise_for_status()
        return answer.json()

    def public_key_pem(self) -> str:
        """The public half of the signing key in the project's secrets/."""
        key = serialization.load_pem_private_key(
            (self.project_dir / "secrets" / "signing_key.pem").read_bytes(), password=None
        )
        return (
            key.public_key()
            .public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            .decode()
            .strip()
        )

    def save_logs(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        names = self.compose("ps", "-a", "--format", "{{.Name}}").stdout.split()
        for name in names:
            log = subprocess.run(["docker", "logs", "-t", name], capture_output=True, timeout=60)
            (folder / f"{name}.log").write_bytes(log.stdout + log.stderr)


def make_project(folder: Path, http_port: int, grpc_port: int, dashboard_port: int) -> None:
    """.env and secrets/ as secrets/README.md and .env.example tell a user to make them."""
    secrets = folder / "secrets"
    secrets.mkdir(parents=True)
    (secrets / "ingest_tokens.txt").write_text(TOKEN + "\n")
    key = secrets / "signing_key.pem"
    key.write_bytes(
        Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key.chmod(0o600)
    os.chown(key, SERVICE_UID, SERVICE_UID)  # readable by the service user only
    (folder / ".env").write_text(
        "POSTGRES_PASSWORD=compose-stack-test\n"
        f"TPMLEDGER_HTTP_PORT={http_port}\n"
        f"TPMLEDGER_GRPC_PORT={grpc_port}\n"
        f"TPMLEDGER_DASHBOARD_PORT={dashboard_port}\n"
        "TPMLEDGER_RESEAL_QUIET_S=2\n"
    )


@pytest.fixture(scope="module")
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, docker_engine: None
) -> Iterator[Stack]:
    if os.geteuid() != 0:
        pytest.skip("the test project's signing key is handed to the service uid: needs root")
    folder = tmp_path_factory.mktemp("compose-project")
    ports = free_port(), free_port(), free_port()
    make_project(folder, *ports)
    env = {
        **os.environ,
        "TPMLEDGER_COMPOSE_PROJECT_DIR": str(folder),
        "COMPOSE_PROJECT_NAME": f"tpmledger-test-{os.getpid()}",
        # The host's Compose v2 where pip put it (scripts/test.sh installs it into .venv).
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env = {k: v for k, v in env.items() if not k.startswith("TPMLEDGER_") or "COMPOSE" in k}
    stack = Stack(folder, env, *ports)
    came_up = False
    try:
        # First run on a fresh machine: debootstrap, wheels and image builds (minutes).
        up = stack.script("up", timeout=1800)
        came_up = True
        sys.stderr.write(up.stderr)
        yield stack
    finally:
        failed = [
            n for n in request.session.stash.get(FAILED, []) if n.startswith(request.node.nodeid)
        ]
        try:
            if failed or not came_up:
                stack.save_logs(LOGS)
        finally:  # the stack goes down even when its logs could not be read
            subprocess.run(
                ["bash", str(SCRIPT), "down", "-v"], env=env, capture_output=True, timeout=300
            )


def shard_exporters(stack: Stack, count: int, grpc: bool) -> list[SpanExporter]:
    if grpc:
        return [
            GrpcSpanExporter(
                endpoint=f"127.0.0.1:{stack.grpc_port}",
                insecure=True,
                headers=(("authorization", f"Bearer {TOKEN}"),),
                timeout=30,
            )
            for _ in range(count)
        ]
    return [
        OTLPSpanExporter(endpoint=f"{stack.api}/v1/traces", headers=stack.auth, timeout=30)
        for _ in range(count)
    ]


def tokens(spans: Sequence[ReadableSpan], key: str) -> int:
    return sum(int(s.attributes.get(key, 0)) for s in spans if s.attributes)  # type: ignore[arg-type]


def sealed_run(stack: Stack, run_id: str, attempts: int) -> dict[str, Any]:
    """The run once analytics has sealed every attempt sent."""

    seen: dict[str, Any] = {}

    def ready() -> dict[str, Any] | None:
        runs = {r["run_id"]: r for r in stack.get("/v1/runs")["runs"]}
        run = seen["run"] = runs.get(run_id)
        if run and run["latest_seal"] and run["attempts"] == attempts:
            detail: dict[str, Any] = stack.get(f"/v1/runs/{run_id}")
            if detail.get("attempts") == attempts and detail.get("seal"):
                return detail
        return None

    try:
        return wait_for(ready, timeout=180, interval=1.0)
    except TimeoutError:
        # What the CI report shows: the run as listed, and what the worker said.
        worker = stack.compose("logs", "--no-color", "--tail", "40", "analytics").stdout
        raise AssertionError(f"{run_id} not sealed: {seen.get('run')}\n{worker}") from None


def assert_exact_totals(stack: Stack, run_id: str, sent: Sequence[ReadableSpan]) -> dict[str, Any]:
    detail = sealed_run(stack, run_id, len(sent))
    assert detail["attempts"] == len(sent)
    minutes = stack.get(f"/v1/runs/{run_id}/minutes")["minutes"]
    assert sum(m["calls_in_minute"] for m in minutes) == len(sent)
    assert sum(m["prompt_tpm_in"] for m in minutes) == tokens(sent, "gen_ai.usage.input_tokens")
    assert sum(m["completion_tpm_out"] for m in minutes) == tokens(
        sent, "gen_ai.usage.output_tokens"
    )
    return detail


def test_fleet_over_http_and_grpc_gives_exact_totals(stack: Stack) -> None:
    """Four shards, two exporting over OTLP/HTTP and two over gRPC to the published ports;
    every 10th batch is sent twice (a client that lost the answer)."""
    run_id = "compose_fleet"
    http_spans = llm_spans(300, run_id=run_id, shard=0) + llm_spans(300, run_id=run_id, shard=1)
    grpc_spans = llm_spans(300, run_id=run_id, shard=2) + llm_spans(300, run_id=run_id, shard=3)
    assert httpx.post(f"{stack.api}/v1/traces", content=b"", timeout=10).status_code == 401
    for spans, grpc in ((http_spans, False), (grpc_spans, True)):
        load = ExportLoad(shard_exporters(stack, 2, grpc), batches(spans, 50)).start()
        load.join(timeout=120)
    sent = http_spans + grpc_spans
    detail = assert_exact_totals(stack, run_id, sent)
    assert detail["shard_count"] == 4
    stack.runs_sent[run_id] = sent


def test_dashboard_answers_on_its_published_port_with_the_token(stack: Stack) -> None:
    dashboard = f"http://127.0.0.1:{stack.dashboard_port}"
    assert httpx.get(f"{dashboard}/", timeout=30).status_code == 401
    with httpx.Client(base_url=dashboard, timeout=30) as browser:
        # ?token= logs in once: a redirect to the clean URL, setting the session cookie.
        login = browser.get("/", params={"token": TOKEN})
        assert login.status_code == 303 and TOKEN not in login.headers["location"]
        page = browser.get(login.headers["location"])
        assert page.status_code == 200
        assert "_dash-config" in page.text  # the Dash app itself, not a proxy's page
        # The token is remembered as a cookie: the app's own requests need no token.
        layout = browser.get("/_dash-layout")
        assert layout.status_code == 200
    assert httpx.get(f"{dashboard}/_dash-layout", timeout=30).status_code == 401


def test_summary_exported_in_the_container_verifies_on_the_host(
    stack: Stack, tmp_path: Path
) -> None:
    run_id = "compose_fleet"
    if run_id not in stack.runs_sent:
        pytest.skip("needs the fleet run of the first test")
    stack.compose("exec", "-T", "analytics", "tpmledger", "summary", "export", run_id,
                  "--out", f"/data/exports/{run_id}")  # fmt: skip
    stack.compose("cp", f"analytics:/data/exports/{run_id}", str(tmp_path / "export"))
    verify = subprocess.run(
        [sys.executable, "-m", "tpmledger.cli.main", "summary", "verify", str(tmp_path / "export")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    # Signed with the compose secret's key, the one the read API publishes.
    exported = (tmp_path / "export" / "service.pub").read_text().strip()
    assert exported == stack.public_key_pem()
    assert [k["pem"].strip() for k in stack.get("/v1/keys")["keys"]] == [exported]


def test_ingest_restart_while_a_sender_retries_loses_and_duplicates_nothing(
    stack: Stack, caplog: pytest.LogCaptureFixture
) -> None:
    run_id = "compose_restart"
    spans = llm_spans(2400, run_id=run_id, shard=0)
    senders = [*shard_exporters(stack, 1, grpc=False), *shard_exporters(stack, 1, grpc=True)]
    load = ExportLoad(senders, batches(spans, 40), pace_s=0.25)
    requests = len(batches(spans, 40)) + len(range(0, len(batches(spans, 40)), 10))
    caplog.set_level("WARNING", logger="opentelemetry.exporter")
    load.start()
    wait_for(lambda: load.acknowledged >= 4, timeout=60, interval=0.1)
    stack.compose("restart", "ingest")
    acknowledged_after_restart = load.acknowledged
    load.join(timeout=300)
    # The restart landed mid-load: the exporters met a closed listener and retried.
    assert acknowledged_after_restart < requests
    retried = [r for r in caplog.records if r.name.startswith("opentelemetry.exporter")]
    assert retried or load.failures, "no export met the restart"
    assert load.acknowledged == requests
    assert_exact_totals(stack, run_id, spans)
    stack.runs_sent[run_id] = spans


def test_down_then_up_keeps_runs_seals_and_the_signing_key(stack: Stack) -> None:
    if not stack.runs_sent:
        pytest.skip("needs the runs of the tests before")
    before = {r["run_id"]: r for r in stack.get("/v1/runs")["runs"]}
    keys_before = stack.get("/v1/keys")
    stack.script("down", timeout=300)
    started = time.monotonic()
    stack.script("up", timeout=900)
    sys.stderr.write(f"down/up: back in {time.monotonic() - started:.0f} s\n")
    after = {r["run_id"]: r for r in stack.get("/v1/runs")["runs"]}
    for run_id, sent in stack.runs_sent.items():
        assert after[run_id]["attempts"] == len(sent)
        assert after[run_id]["latest_seal"] == before[run_id]["latest_seal"]
    assert stack.get("/v1/keys") == keys_before
    assert [k["pem"].strip() for k in keys_before["keys"]] == [stack.public_key_pem()]
    # New data after the restart still lands and seals.
    spans = llm_spans(120, run_id="compose_after_up", shard=0)
    ExportLoad(shard_exporters(stack, 1, grpc=True), batches(spans, 40)).start().join(120)
    assert_exact_totals(stack, "compose_after_up", spans)
