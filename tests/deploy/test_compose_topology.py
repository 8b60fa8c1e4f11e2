"""The compose topology run as plain processes: the closest honest check without Docker.

Each service runs exactly the command docker-compose.yml gives it, with the environment the
file gives it (interpolated as compose would from a test .env), the secrets as files, and the
database URL pointed at the test's PostgreSQL. Only two things differ from a container: the
listeners use free loopback ports instead of 0.0.0.0 inside a network namespace.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.fixtures.servers import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "compose-test-token-0123456789"
_VAR = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)(?::([-?])((?:[^{}]|\$\{[^}]*\})*))?\}")

pytestmark = pytest.mark.slow


def interpolate(value: str, dotenv: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` (nested) and ``${VAR:?error}``."""

    def replace(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3) or ""
        if dotenv.get(name):
            return dotenv[name]
        if op == "-":
            return interpolate(arg, dotenv)
        if op == "?":
            raise AssertionError(f"compose requires {name}: {arg}")
        return ""

    return _VAR.sub(replace, value)


def service_env(service: dict[str, Any], dotenv: dict[str, str]) -> dict[str, str]:
    return {k: interpolate(str(v), dotenv) for k, v in service.get("environment", {}).items()}


def local_command(command: list[str]) -> list[str]:
    """The service's command as a local process: loopback instead of 0.0.0.0."""
    argv = ["127.0.0.1" if word == "0.0.0.0" else word for word in command]
    assert argv[0] == "tpmledger"
    return [sys.executable, "-m", "tpmledger.cli.main", *argv[1:]]


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in started:
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_compose_services_as_processes_ingest_seal_and_show(
    database_url: str, tmp_path: Path, processes: list[subprocess.Popen[bytes]]
) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    secrets = tmp_path / "run-secrets"
    secrets.mkdir()
    (secrets / "ingest_tokens").write_text(TOKEN + "\n")
    key = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    (secrets / "signing_key").write_bytes(key)
    http_port, grpc_port, dash_port = free_port(), free_port(), free_port()
    dotenv = {
        "POSTGRES_PASSWORD": "unused-here",
        "TPMLEDGER_DATABASE_URL": database_url,
        "TPMLEDGER_RESEAL_QUIET_S": "1",
        "TPMLEDGER_HTTP_PORT": str(http_port),
    }

    def env_for(name: str) -> dict[str, str]:
        env = service_env(services[name], dotenv)
        # Container paths of the compose file, mapped onto this test's folders.
        env = {k: v.replace("/run/secrets", str(secrets)) for k, v in env.items()}
        env["TPMLEDGER_DATA_DIR"] = str(tmp_path / "data" / name)
        # The ports compose maps onto the host, given to the process directly.
        env.update(
            TPMLEDGER_HTTP_PORT=str(http_port),
            TPMLEDGER_GRPC_PORT=str(grpc_port),
            TPMLEDGER_DASHBOARD_PORT=str(dash_port),
            TPMLEDGER_ANALYTICS_POLL_S="0.5",
            PYTHONUNBUFFERED="1",
        )
        base = {k: v for k, v in os.environ.items() if not k.startswith("TPMLEDGER_")}
        return {**base, **env}

    migrate = subprocess.run(
        local_command(services["migrate"]["command"]),
        env=env_for("migrate"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrate.returncode == 0, migrate.stderr

    for name in ("ingest", "analytics", "dashboard"):
        processes.append(
            subprocess.Popen(local_command(services[name]["command"]), env=env_for(name))
        )

    def healthy(name: str, port: int) -> bool:
        test = services[name]["healthcheck"]["test"][1:]
        test = [w.replace(":4318/", f":{port}/").replace(":8050/", f":{port}/") for w in test]
        for proc in processes:
            assert proc.poll() is None, f"a service exited with {proc.returncode}"
        return subprocess.run(local_command(test), capture_output=True, timeout=30).returncode == 0

    wait_for(lambda: healthy("ingest", http_port), timeout=90, interval=0.5)
    wait_for(lambda: healthy("dashboard", dash_port), timeout=90, interval=0.5)

    # Unauthenticated export is refused; with the secret's token it is stored.
    api = f"http://127.0.0.1:{http_port}"
    assert httpx.post(f"{api}/v1/traces", content=b"", timeout=10).status_code == 401
    provider = TracerProvider(
        resource=Resource.create({"tpmledger.run.id": "compose_run", "tpmledger.shard.id": "0"})
    )
    exporter = OTLPSpanExporter(
        endpoint=f"{api}/v1/traces", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("compose-test")
    for i in range(5):
        with tracer.start_as_current_span("chat") as span:
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute("gen_ai.usage.input_tokens", 100 + i)
            span.set_attribute("gen_ai.usage.output_tokens", 10)
    provider.shutdown()

    auth = {"Authorization": f"Bearer {TOKEN}"}

    def sealed() -> dict[str, Any] | None:
        runs = httpx.get(f"{api}/v1/runs", headers=auth, timeout=10).json()["runs"]
        run = next((r for r in runs if r["run_id"] == "compose_run"), None)
        return run if run and run["latest_seal"] else None

    run = wait_for(sealed, timeout=90, interval=0.5)
    assert run["attempts"] == 5
    detail = httpx.get(f"{api}/v1/runs/compose_run", headers=auth, timeout=10).json()
    assert (
        detail["peak_minute"]["prompt_tpm_in"] + detail["peak_minute"]["completion_tpm_out"]
        == (detail["peak_minute"]["tpm_total"])
    )

    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        pytest.skip("chromium / chromedriver not installed: dashboard not checked in a browser")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"):
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path / 'chromium'}")
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    # The dashboard shows run data: with tokens configured it asks for one too.
    assert httpx.get(f"http://127.0.0.1:{dash_port}/", timeout=10).status_code == 401
    try:
        driver.get(f"http://127.0.0.1:{dash_port}/?token={TOKEN}")  # then a cookie
        wait_for(lambda: "compose_run" in driver.page_source, timeout=60, interval=0.3)
        assert run["latest_seal"][:12] in driver.page_source
    finally:
        driver.quit()
