"""The compare page in a real headless Chromium: verdict, rule, parameters, chart, table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.by import By

from tests.analytics.compare_builders import seed_profile
from tests.dashboard.browser_helpers import (
    PAGE_WAIT_S,
    screenshot,
    table_cells,
    text_of,
    wait_graph,
    wait_text,
)
from tests.dashboard.conftest import RunningDashboard
from tests.fixtures.servers import wait_for

pytestmark = pytest.mark.browser


def test_compare_page_shows_the_verdict_with_its_rule(
    page_database_url: str, dashboard_server: RunningDashboard, browser: Any, output_dir: Path
) -> None:
    seed_profile(page_database_url, "base", calls=20, tokens=100, retried=2)
    seed_profile(page_database_url, "cand", calls=20, tokens=103, retried=8)
    seed_profile(page_database_url, "worse", calls=14, tokens=100, retried=1)

    browser.get(dashboard_server.url + "/compare?a=base&b=cand")
    assert wait_text(browser, "compare-verdict") == "moved_the_bottleneck"
    rule = text_of(browser, "compare-rule")
    assert rule.startswith("Rule: throughput rose +3.0 % but retry rate rose")
    own = text_of(browser, "compare-bottlenecks")
    assert own == "Each run's own bottleneck: A (base): not measured · B (cand): not measured"
    params = text_of(browser, "compare-params")
    assert "2000 resamples, seed 0, 95 % percentile interval" in params
    assert "at least 3 such minutes" in params

    figure = wait_graph(browser, "compare-graph", lambda f: len(f["traces"]) >= 6)
    names = [t["name"] for t in figure["traces"]]
    assert names[0] == "A base: TPM (total)" and "B cand: retry rate" in names
    a_tpm = figure["traces"][0]
    assert a_tpm["x"] == list(range(8)) and len(a_tpm["y"]) == 8
    retry_b = next(t for t in figure["traces"] if t["name"] == "B cand: retry rate")
    assert retry_b["yaxis"] == "y2" and all(abs(v - 8 / 28) < 1e-9 for v in retry_b["y"])

    cells = table_cells(browser, "#compare-figures tbody tr")
    by_label = {row[0]: row for row in cells}
    assert by_label["Retry rate"][1:3] == ["9.09 %", "28.57 %"]
    assert by_label["Sustained TPM (total)"][3] == "+60"
    screenshot(browser, output_dir, "compare-page")

    # Picking another candidate compares again.
    browser.find_element(By.CSS_SELECTOR, "#compare-b").click()
    browser.find_element(
        By.XPATH, "//*[contains(@class,'option') and normalize-space()='worse']"
    ).click()
    wait_for(lambda: text_of(browser, "compare-verdict") == "regressed", timeout=PAGE_WAIT_S)
    assert "throughput fell beyond its interval" in text_of(browser, "compare-rule")
    screenshot(browser, output_dir, "compare-page-regressed")


def test_a_bad_slo_is_explained_on_the_page(
    page_database_url: str, dashboard_server: RunningDashboard, browser: Any
) -> None:
    seed_profile(page_database_url, "s1", calls=20, tokens=100, retried=2)
    seed_profile(page_database_url, "s2", calls=20, tokens=100, retried=2)
    browser.get(dashboard_server.url + "/compare?a=s1&b=s2&slo=ttft=soon")
    assert "not a number of seconds" in wait_text(browser, "compare-error")
