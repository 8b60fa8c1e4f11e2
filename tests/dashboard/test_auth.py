"""The dashboard requires an ingest token once one is configured, like the read API."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx

from tests.dashboard.conftest import start_dashboard
from tests.fixtures.servers import free_port


def test_pages_and_callbacks_need_a_token_when_tokens_are_configured(database_url: str) -> None:
    server = start_dashboard(database_url, env={"TPMLEDGER_INGEST_TOKENS": '["s3cret-token"]'})
    try:
        anonymous = httpx.get(f"{server.url}/", timeout=10)
        assert anonymous.status_code == 401
        assert anonymous.headers["WWW-Authenticate"].startswith("Basic realm=")
        callback = httpx.post(f"{server.url}/_dash-update-component", json={}, timeout=10)
        assert callback.status_code == 401
        assert (
            httpx.get(f"{server.url}/runs/x", auth=("me", "wrong"), timeout=10).status_code == 401
        )
        assert httpx.get(f"{server.url}/", auth=("anyone", "s3cret-token"), timeout=10).is_success
        bearer = {"Authorization": "Bearer s3cret-token"}
        assert httpx.get(f"{server.url}/", headers=bearer, timeout=10).is_success
        assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
        # A browser opens /?token=… once; the cookie then carries the page's own requests.
        with httpx.Client(base_url=server.url, timeout=10) as browser:
            assert browser.get("/", params={"token": "s3cret-token"}).is_success
            assert browser.cookies.get("tpmledger_token") == "s3cret-token"
            assert browser.post("/_dash-update-component", json={}).status_code != 401
    finally:
        server.stop()


def test_a_non_loopback_bind_without_tokens_is_refused(database_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPMLEDGER_")}
    env["TPMLEDGER_DATABASE_URL"] = database_url
    result = subprocess.run(
        [sys.executable, "-m", "tpmledger.cli.main", "serve", "dashboard", "--host", "0.0.0.0",
         "--dashboard-port", str(free_port())],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2
    assert "refusing to bind 0.0.0.0" in result.stderr and "--insecure" in result.stderr
