"""Pages whose every refresh takes longer than their refresh interval still show their data
(docs/dashboard.md), in a real headless Chromium.

Dash drops a callback's pending answer when the same callback is asked again. A page whose
interval ticked faster than the server answered stayed empty for good: a full CI run, the
machine's two cores shared by every lane, left the run page blank for 120 s. The seam: the
server sleeps before each refresh (longer than the interval), so every refresh is slow.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.browser_helpers import (
    PAGE_WAIT_S,
    screenshot,
    table_cells,
    text_of,
    wait_graph,
)
from tests.dashboard.builders import seed_sealed_run
from tests.dashboard.conftest import RunningDashboard, start_dashboard
from tests.fixtures.servers import wait_for
from tpmledger.storage.server.database import raw_transaction

pytestmark = pytest.mark.browser

INTERVAL_MS = 100
SERVER_DELAY_S = 0.6  # each refresh of the run page: six intervals
# The runs list refreshes every max(interval, 2 s) x 2 = 4 s (pages/runs.py).
LIST_DELAY_S = 4.5

# The refresh callbacks' server-side functions, made slow; the interval made short.
_SLOW_SERVER = f"""
import functools, time
import tpmledger.dashboard.app as app
import tpmledger.dashboard.pages.run as run_page
import tpmledger.dashboard.pages.runs as runs_page

def slowly(function, delay_s):
    def slow(*args, **kwargs):
        time.sleep(delay_s)
        return function(*args, **kwargs)
    return slow

run_page.run_panels = slowly(run_page.run_panels, {SERVER_DELAY_S})
run_page.throughput_view = slowly(run_page.throughput_view, {SERVER_DELAY_S})
runs_page.runs_table_view = slowly(runs_page.runs_table_view, {LIST_DELAY_S})
app.create_app = functools.partial(app.create_app, refresh_ms={INTERVAL_MS})
"""


@pytest.fixture(scope="module")
def slow_dashboard(page_database_url: str) -> Iterator[RunningDashboard]:
    server = start_dashboard(page_database_url, prelude=_SLOW_SERVER)
    try:
        yield server
    finally:
        server.stop()


def test_a_run_page_slower_than_its_interval_shows_its_figures_and_keeps_refreshing(
    page_database_url: str, slow_dashboard: RunningDashboard, browser: Any, output_dir: Path
) -> None:
    seed_sealed_run(page_database_url, "slow-sealed", shards=2, minutes=6)
    seed_sealed_run(page_database_url, "slow-live", shards=2, minutes=6, live=True)

    browser.get(f"{slow_dashboard.url}/runs/slow-sealed")
    wait_for(lambda: text_of(browser, "run-status") == "sealed", timeout=PAGE_WAIT_S)
    assert wait_graph(browser, "run-throughput-graph")["traces"]
    screenshot(browser, output_dir, "sealed-run-slow-server")

    # A live run refreshes on and on, one interval after the last refresh answered: what
    # the database says next reaches the page.
    browser.get(f"{slow_dashboard.url}/runs/slow-live")
    wait_for(lambda: text_of(browser, "run-status") == "live — provisional", timeout=PAGE_WAIT_S)
    assert wait_graph(browser, "run-throughput-graph")["traces"]
    for attempts in (123_457, 123_458):
        with raw_transaction(page_database_url) as conn:
            conn.execute("UPDATE runs SET attempts = %s WHERE run_id = 'slow-live'", (attempts,))
        wait_for(
            lambda: f"{attempts:,} attempts" in text_of(browser, "run-header"),  # noqa: B023
            timeout=PAGE_WAIT_S,
        )


def test_the_runs_list_slower_than_its_interval_shows_every_run(
    page_database_url: str, slow_dashboard: RunningDashboard, browser: Any
) -> None:
    seed_sealed_run(page_database_url, "slow-listed", shards=2, minutes=3)
    browser.get(slow_dashboard.url + "/")
    wait_for(
        lambda: (
            "slow-listed"
            in [cells[0] for cells in table_cells(browser, "#runs-table-grid tbody tr")]
        ),
        timeout=PAGE_WAIT_S,
    )
