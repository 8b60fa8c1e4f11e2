"""DNS rebinding: a token-less ingest answers only the host names it serves
(docs/configuration.md#host-names), on the real server."""

from __future__ import annotations

import httpx

from tests.fixtures.servers import start_ingest
from tpmledger.storage.writers.ingest_tokens import create_token


def status(url: str, host: str | None = None) -> int:
    headers = {"Host": host} if host else {}
    return httpx.get(url, headers=headers, timeout=10).status_code


def test_without_tokens_only_loopback_and_configured_names_are_served(database_url: str) -> None:
    server = start_ingest(database_url, env={"TPMLEDGER_ALLOWED_HOSTS": '["ledger.example"]'})
    try:
        runs = f"{server.http_url}/v1/runs"
        port = server.http_url.rsplit(":", 1)[1]
        assert status(runs) == 200  # Host: 127.0.0.1:<port>
        for served in (f"localhost:{port}", "[::1]", f"ledger.example:{port}", "LEDGER.example."):
            assert status(runs, served) == 200, served
        answer = httpx.get(runs, headers={"Host": f"rebound.attacker.example:{port}"}, timeout=10)
        assert answer.status_code == 421
        assert "TPMLEDGER_ALLOWED_HOSTS" in answer.text
        assert status(f"{server.http_url}/docs", "rebound.attacker.example") == 421
    finally:
        server.stop()


def test_with_tokens_the_token_guards_and_any_host_name_is_served(database_url: str) -> None:
    token = create_token(database_url, "team", "read")
    server = start_ingest(database_url)
    try:
        answer = httpx.get(
            f"{server.http_url}/v1/runs",
            headers={"Host": "ledger.internal", "Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert answer.status_code == 200
    finally:
        server.stop()
