"""The runs page in a real headless Chromium: the table, statuses, links, empty state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.browser_helpers import (
    PAGE_WAIT_S,
    click_link,
    screenshot,
    table_cells,
    text_of,
    wait_text,
)
from tests.dashboard.builders import seed_sealed_run
from tests.dashboard.conftest import API_BASE_URL, RunningDashboard, start_dashboard
from tests.dashboard.lifecycle_builders import seed_unsealed_run
from tests.fixtures.servers import wait_for
from tpmledger.dashboard.display import fmt_int, fmt_rate

pytestmark = pytest.mark.browser


def _rows(browser: Any) -> dict[str, list[str]]:
    """Runs table rows keyed by run id (the list refreshes itself, so read it atomically)."""
    return {cells[0]: cells for cells in table_cells(browser, "#runs-table-grid tbody tr")}


def test_runs_table_lists_every_run_and_links_to_it(
    page_database_url: str, dashboard_server: RunningDashboard, browser: Any, output_dir: Path
) -> None:
    sealed = seed_sealed_run(
        page_database_url, "fleet a/b", shards=8, minutes=6, peak=2, completion_peak=3
    )
    seed_sealed_run(page_database_url, "run-live", shards=2, live=True, with_ttft=False)
    seed_unsealed_run(page_database_url, "run-fresh", attempts=42)

    browser.get(dashboard_server.url + "/")
    rows = wait_for(lambda: len(_rows(browser)) == 3 and _rows(browser), timeout=PAGE_WAIT_S)

    cells = rows["fleet a/b"]
    peak = sealed.metrics["peak_minute"]
    assert cells[1] == "sealed"
    assert cells[2] == "8"
    assert cells[3] == f"{sealed.metrics['attempts']:,}"
    assert cells[4].splitlines() == [fmt_int(peak["tpm_total"]), "2026-02-01 03:46 UTC"]
    assert cells[5] == fmt_rate(sealed.metrics["attempt_success_rate"])
    assert cells[6] == fmt_rate(sealed.metrics["retry_rate"])
    assert cells[7] == "500 ms"
    assert cells[8] == sealed.seal[:12]
    assert cells[9] == "2026-02-01 03:44:00 UTC"
    # A live run's figures are provisional; those minute rows cannot state exactly wait
    # for the seal. A run whose first minutes are not computed yet says so.
    live_status = rows["run-live"][1].splitlines()
    assert live_status[0] == "live — provisional" and live_status[1].startswith("data as of ")
    assert rows["run-live"][7] == "not measured yet"
    assert rows["run-fresh"][1].splitlines()[0] == "live — provisional"
    assert rows["run-fresh"][4] == "computing"
    screenshot(browser, output_dir, "runs-page")

    # Follow the link (the run id holds a space and a slash, so it is URL-quoted).
    wait_for(lambda: click_link(browser, "fleet a/b"), timeout=PAGE_WAIT_S)
    wait_for(lambda: "/runs/fleet%20a%2Fb" in browser.current_url, timeout=PAGE_WAIT_S)
    assert wait_text(browser, "run-kpi-peak-total-value") == fmt_int(peak["tpm_total"])
    assert text_of(browser, "run-kpi-shards-value") == "8"
    screenshot(browser, output_dir, "run-page-from-link")


def test_empty_runs_page_shows_the_exporter_environment(
    database_url: str, browser: Any, output_dir: Path
) -> None:
    server = start_dashboard(database_url)
    try:
        browser.get(server.url + "/")
        lines = wait_text(browser, "runs-empty-env").splitlines()
        assert lines[0] == f"export OTEL_EXPORTER_OTLP_ENDPOINT={API_BASE_URL}"
        assert any(
            line.startswith("export OTEL_RESOURCE_ATTRIBUTES=tpmledger.run.id=") for line in lines
        )
        screenshot(browser, output_dir, "runs-empty")
    finally:
        assert server.stop() == 0  # SIGTERM stops the server cleanly
