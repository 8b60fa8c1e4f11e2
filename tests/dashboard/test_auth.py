"""The dashboard requires a read token once any token is configured, like the read API
(docs/ingest.md#token-scopes): HTTP checks, then the ``?token=`` login, the cookie and the
download links in a real headless Chromium."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium.webdriver.common.by import By

from tests.analytics.seeding import store
from tests.dashboard.browser_helpers import PAGE_WAIT_S
from tests.dashboard.conftest import start_dashboard
from tests.fixtures.servers import free_port, start_ingest, wait_for
from tests.storage.builders import BASE_NS, MINUTE_NS, attempt_row
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.storage.writers.ingest_tokens import create_token


@pytest.mark.slow
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
        with httpx.Client(base_url=server.url, timeout=10, follow_redirects=True) as browser:
            assert browser.get("/", params={"token": "s3cret-token"}).is_success
            assert browser.cookies.get("tpmledger_token") == "s3cret-token"
            assert browser.post("/_dash-update-component", json={}).status_code != 401
    finally:
        server.stop()


@pytest.mark.slow
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


@pytest.mark.slow
def test_login_sets_a_cookie_and_redirects_to_a_clean_url(database_url: str) -> None:
    read = create_token(database_url, "team", "read")
    ingest = create_token(database_url, "fleet", "ingest")
    server = start_dashboard(database_url)
    try:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            login = client.get("/runs/x", params={"token": read, "window": "1h"})
            assert login.status_code == 303
            assert login.headers["location"] == "/runs/x?window=1h"  # the token is gone
            cookie = login.headers["set-cookie"]
            assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Secure" not in cookie
            assert client.get("/").is_success  # the cookie carries on
        # Behind a TLS-terminating proxy the cookie is Secure too.
        proxied = httpx.get(
            f"{server.url}/",
            params={"token": read},
            headers={"X-Forwarded-Proto": "https"},
            timeout=10,
        )
        assert proxied.status_code == 303 and "Secure" in proxied.headers["set-cookie"]
        # An ingest token cannot read the dashboard, in the URL or as a password.
        assert httpx.get(f"{server.url}/", params={"token": ingest}, timeout=10).status_code == 403
        assert httpx.get(f"{server.url}/", auth=("me", ingest), timeout=10).status_code == 403
        assert httpx.get(f"{server.url}/", params={"token": "nope"}, timeout=10).status_code == 401
        # A token created while the dashboard runs logs in on its first request.
        fresh = create_token(database_url, "newcomer", "read")
        assert httpx.get(f"{server.url}/", auth=("me", fresh), timeout=10).is_success
    finally:
        server.stop()


@pytest.mark.browser
@pytest.mark.slow
def test_a_browser_logs_in_once_and_the_download_links_work_with_the_cookie(
    database_url: str, browser: Any, tmp_path: Path
) -> None:
    read = create_token(database_url, "team", "read")
    create_token(database_url, "fleet", "ingest")
    store(database_url, [
        attempt_row(run_id="auth-run", start_ns=BASE_NS + m * MINUTE_NS,
                    end_ns=BASE_NS + m * MINUTE_NS + 2_000_000_000)
        for m in range(3)
    ])  # fmt: skip
    seal_run(database_url, "auth-run")
    ingest = start_ingest(database_url, env={"TPMLEDGER_DATA_DIR": str(tmp_path / "data")})
    server = start_dashboard(database_url, env={"TPMLEDGER_PUBLIC_API_URL": ingest.http_url})
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    browser.execute_cdp_cmd(
        "Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)}
    )
    try:
        browser.get(f"{server.url}/runs/auth-run?token={read}")
        wait_for(lambda: browser.current_url == f"{server.url}/runs/auth-run", timeout=PAGE_WAIT_S)
        (cookie,) = [c for c in browser.get_cookies() if c["name"] == "tpmledger_token"]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and not cookie["secure"]
        assert browser.execute_script("return document.cookie") == ""  # not readable by scripts
        wait_for(
            lambda: browser.find_elements(By.CSS_SELECTOR, "#run-prov-downloads a"),
            timeout=PAGE_WAIT_S,
        )
        links = {
            a.text: a.get_attribute("href")
            for a in browser.find_elements(By.CSS_SELECTOR, "#run-prov-downloads a")
        }
        assert all(href.startswith(ingest.http_url) for href in links.values()), links
        # Shown in the browser: the signed summary and the key list (a 401 would show instead).
        for label, expected in (("signed summary", "payloadType"), ("public keys", "PUBLIC KEY")):
            (href,) = [h for text, h in links.items() if text.startswith(label)]
            browser.get(href)
            assert expected in browser.page_source, browser.page_source[:500]
        # Downloaded as files: the canonical event file and the PEM key.
        for label in ("events.jsonl", "current public key"):
            (href,) = [h for text, h in links.items() if text.startswith(label)]
            browser.get(href)
        wait_for(lambda: len(list(downloads.glob("*.crdownload"))) == 0
                 and len(list(downloads.iterdir())) == 2, timeout=PAGE_WAIT_S)  # fmt: skip
        events = (downloads / "events.jsonl").read_text()
        assert events.count("\n") == 3 and '"run_id":"auth-run"' in events
        (pem,) = [p for p in downloads.iterdir() if p.name != "events.jsonl"]
        assert "BEGIN PUBLIC KEY" in pem.read_text()
        assert read not in ingest.log() and read not in server.log()
    finally:
        browser.delete_all_cookies()
        server.stop()
        ingest.stop()


@pytest.mark.slow
def test_a_token_less_dashboard_answers_only_the_host_names_it_serves(database_url: str) -> None:
    """DNS rebinding: a page whose own name resolves to 127.0.0.1 is refused (421)."""
    server = start_dashboard(database_url)
    try:
        assert httpx.get(f"{server.url}/", timeout=10).is_success
        assert httpx.get(f"{server.url}/", headers={"Host": "localhost"}, timeout=10).is_success
        rebound = httpx.get(f"{server.url}/", headers={"Host": "attacker.example"}, timeout=10)
        assert rebound.status_code == 421 and "TPMLEDGER_ALLOWED_HOSTS" in rebound.text
    finally:
        server.stop()
