"""A real ``tpmledger serve dashboard`` process and a real headless Chromium."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import create_test_database, drop_test_database
from tests.fixtures.servers import free_port, terminate, wait_for

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
API_BASE_URL = "http://127.0.0.1:4999"  # only written into links; nothing is fetched from it


@dataclass
class RunningDashboard:
    """The dashboard served by waitress in its own process."""

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM and wait; the exit code (SIGKILL only if it does not stop)."""
        return terminate(self.process, timeout)


# Exactly what ``tpmledger serve dashboard`` does after resolving the database: build
# Settings from the environment and call ``dashboard.app.run`` (blocks until SIGTERM).
_SERVE = (
    "from tpmledger.settings import Settings; "
    "from tpmledger.dashboard.app import run; run(Settings())"
)


def start_dashboard(
    database_url: str, *, env: dict[str, str] | None = None, prelude: str = ""
) -> RunningDashboard:
    """``dashboard.app.run(Settings())`` in a subprocess on a free port, ready on ``/healthz``.

    ``prelude``: Python statements the process runs first (a test's seam, e.g. a slower
    server)."""
    port = free_port()
    log = Path(tempfile.mkstemp(prefix="dashboard-", suffix=".log")[1])
    env = {
        **os.environ,
        "TPMLEDGER_DATABASE_URL": database_url,
        "TPMLEDGER_PUBLIC_API_URL": API_BASE_URL,
        "TPMLEDGER_DASHBOARD_PORT": str(port),
        "PYTHONUNBUFFERED": "1",
        **(env or {}),
    }
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-c", f"{prelude}\n{_SERVE}"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = RunningDashboard(f"http://127.0.0.1:{port}", process, log)

    def ready() -> bool:
        # An exited process is "ready" too, so the wait ends at once and the log is shown.
        if process.poll() is not None:
            return True
        return httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200

    try:
        wait_for(ready, timeout=60, interval=0.2)
    except BaseException:
        server.stop()
        raise
    if process.poll() is not None:
        raise RuntimeError(f"dashboard exited {process.returncode}:\n{server.log()}")
    return server


@pytest.fixture(scope="module")
def page_database_url(pg_server_url: str, template_database: str) -> Iterator[str]:
    """A fresh migrated database shared by one test module (tests use distinct run ids).

    Starting the dashboard and Chromium costs seconds on a loaded machine, so a module
    shares one of each; the database is still new for every module.
    """
    url = create_test_database(pg_server_url, template_database)
    try:
        yield url
    finally:
        drop_test_database(pg_server_url, url)


@pytest.fixture(scope="module")
def dashboard_server(page_database_url: str) -> Iterator[RunningDashboard]:
    """The dashboard over this module's database."""
    server = start_dashboard(page_database_url)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Headless Chromium through chromedriver with a fresh profile; skipped if absent."""
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.skip("chromium / chromedriver not installed")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-dev-shm-usage",
        "--window-size=1440,2200",
        f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
