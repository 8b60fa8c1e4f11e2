"""The sweep page in a real headless Chromium: TPM against cap, the knee, the thresholds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from tests.dashboard.browser_helpers import (
    PAGE_WAIT_S,
    annotation,
    screenshot,
    text_of,
    wait_graph,
    wait_text,
)
from tests.dashboard.conftest import RunningDashboard
from tests.dashboard.lifecycle_builders import seed_sweep
from tests.fixtures.servers import wait_for
from tpmledger.storage.server.database import raw_transaction

pytestmark = pytest.mark.browser


def test_sweep_page_marks_the_knee_and_prints_the_rule(
    page_database_url: str, dashboard_server: RunningDashboard, browser: Any, output_dir: Path
) -> None:
    # 4 → 8 → 16 each gain > 2 % at flat retry; 32 gains 1 % and retries jump: knee = 16.
    seed_sweep(
        page_database_url,
        "capsweep",
        caps=[4, 8, 16, 32],
        tpm=[10_000, 19_000, 30_000, 30_300],
        retry=[0.0, 0.0, 0.005, 0.03],
    )
    seed_sweep(page_database_url, "other", caps=[2, 4], tpm=[1_000, 1_500], retry=[0.0, 0.0])

    browser.get(dashboard_server.url + "/sweeps?sweep_id=capsweep")
    assert wait_text(browser, "sweep-recommended") == "Recommended cap: 16"
    thresholds = text_of(browser, "sweep-thresholds")
    assert "more than 2.0 %" in thresholds and "at most 1.0 points" in thresholds
    assert "at most 0.5 points" in thresholds

    figure = wait_graph(browser, "sweep-graph", lambda f: annotation(f, "knee") is not None)
    bars = next(t for t in figure["traces"] if t["type"] == "bar")
    assert bars["x"] == ["4", "8", "16", "32"]
    assert bars["y"] == [10_000, 19_000, 30_000, 30_300]
    assert {t["name"] for t in figure["traces"] if t["type"] == "scatter"} == {
        "call success rate",
        "retry rate",
    }
    assert annotation(figure, "knee") == "knee: recommended cap 16 (30,000 TPM)"
    rows = browser.find_elements(By.CSS_SELECTOR, "#sweep-points tbody tr")
    assert [r.find_elements(By.TAG_NAME, "td")[0].text for r in rows] == ["4", "8", "16 knee", "32"]
    screenshot(browser, output_dir, "sweep-page")

    # Picking the other sweep redraws the chart.
    browser.find_element(By.CSS_SELECTOR, "#sweep-select").click()
    browser.find_element(
        By.XPATH, "//*[contains(@class,'option') and normalize-space()='other']"
    ).click()
    wait_for(
        lambda: text_of(browser, "sweep-recommended") == "Recommended cap: 4", timeout=PAGE_WAIT_S
    )


def test_a_live_cap_makes_the_recommendation_provisional(
    page_database_url: str, dashboard_server: RunningDashboard, browser: Any, output_dir: Path
) -> None:
    seed_sweep(page_database_url, "halfway", caps=[4, 8], tpm=[1_000, 2_000], retry=[0.0, 0.0])
    # Cap 8's run receives data after its snapshot: it is live again.
    with raw_transaction(page_database_url) as conn:
        conn.execute("UPDATE runs SET updated_at = now() WHERE run_id = 'halfway-cap8'")

    browser.get(dashboard_server.url + "/sweeps?sweep_id=halfway")
    recommended = wait_text(browser, "sweep-recommended")
    assert recommended.startswith("Provisional recommendation: cap ")
    assert "cap 8 still live" in recommended
    rows = browser.find_elements(By.CSS_SELECTOR, "#sweep-points tbody tr")
    statuses = [r.find_elements(By.TAG_NAME, "td")[1].text for r in rows]
    assert statuses == ["sealed", "live — provisional"]
    # A live cap's walk verdict is provisional in words, never "rejected" (issue 37).
    walk = [r.find_elements(By.TAG_NAME, "td")[9].text for r in rows]  # after "Serving side"
    assert "rejected" not in walk[1] and "so far (live, provisional)" in walk[1]
    screenshot(browser, output_dir, "sweep-page-live-cap")


@pytest.mark.parametrize("sweep_id", ["a&b", "sweep #3", "c+d", "x=y?z", "é/%20"])
def test_the_run_pages_sweep_link_reaches_the_sweep_page_intact(sweep_id: str) -> None:
    """Issue 41: the link was not URL-encoded (``&``, ``#``, ``+`` in sweep ids)."""
    from dash._pages import _parse_query_string

    from tpmledger.dashboard.pages.runs import sweep_href

    path, _, query = sweep_href(sweep_id).partition("?")
    assert path == "/sweeps" and "#" not in query
    assert _parse_query_string("?" + query) == {"sweep_id": sweep_id}
