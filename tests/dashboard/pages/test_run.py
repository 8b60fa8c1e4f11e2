"""The run page in a real headless Chromium against a real database."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

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
from tests.dashboard.builders import seed_sealed_run
from tests.dashboard.conftest import API_BASE_URL, RunningDashboard
from tests.dashboard.lifecycle_builders import reseal
from tests.fixtures.servers import wait_for
from tpmledger.dashboard.display import fmt_int, fmt_rate

pytestmark = pytest.mark.browser
RUN_ID = "newgen_full_20260201_030151_sharded"


def _bars_per_minute(figure: dict[str, Any]) -> dict[str, int]:
    """Stacked bar heights summed over shards, per minute."""
    sums: dict[str, int] = {}
    for trace in figure["traces"]:
        if trace["type"] == "bar":
            for x, y in zip(trace["x"], trace["y"], strict=True):
                sums[x] = sums.get(x, 0) + y
    return sums


def _expected(seeded: Any, token: str) -> dict[str, int]:
    return {m.strftime("%Y-%m-%d %H:%M"): v[token] for m, v in seeded.per_minute.items()}


def _switch(browser: Any, label: str) -> None:
    xpath = f"//div[@id='run-token-type']//label[normalize-space()='{label}']"
    browser.find_element(By.XPATH, xpath).click()


def test_run_page_shows_sealed_figures_and_switches_token_type(
    page_database_url: str, dashboard_server: RunningDashboard, browser: Any, output_dir: Path
) -> None:
    seeded = seed_sealed_run(
        page_database_url, RUN_ID, shards=4, minutes=12, peak=5, completion_peak=8
    )
    peak, peak_completion = seeded.metrics["peak_minute"], seeded.metrics["peak_completion_minute"]
    assert peak["minute_utc"] != peak_completion["minute_utc"]  # the switch must move the mark

    browser.get(f"{dashboard_server.url}/runs/{RUN_ID}")

    # KPI cards: the sealed figures, named by token type.
    assert wait_text(browser, "run-kpi-peak-total-value") == fmt_int(peak["tpm_total"])
    assert "Peak TPM (total: prompt + completion)" in text_of(browser, "run-kpi-peak-total")
    assert "2026-02-01 03:49 UTC" in text_of(browser, "run-kpi-peak-total-detail")
    assert text_of(browser, "run-kpi-peak-completion-value") == fmt_int(
        peak_completion["completion_tpm_out"]
    )
    assert text_of(browser, "run-kpi-shards-value") == "4"
    assert text_of(browser, "run-kpi-success-value") == fmt_rate(
        seeded.metrics["call_success_rate"]
    )
    assert text_of(browser, "run-kpi-retry-value") == fmt_rate(seeded.metrics["retry_rate"])
    assert text_of(browser, "run-kpi-ttft-value") == "500 ms"
    assert text_of(browser, "run-status") == "sealed"

    # Throughput versus stability: 4 stacked shards + rates on y2, the total peak marked.
    figure = wait_graph(browser, "run-throughput-graph")
    bar_names = [t["name"] for t in figure["traces"] if t["type"] == "bar"]
    assert bar_names == ["shard 0", "shard 1", "shard 2", "shard 3"]
    rates = {t["name"]: t for t in figure["traces"] if t["type"] == "scatter"}
    assert set(rates) == {"success rate", "retry rate"}
    assert all(t["yaxis"] == "y2" for t in rates.values())
    assert _bars_per_minute(figure) == _expected(seeded, "total")
    assert annotation(figure, "peak") == (
        f"peak total minute 2026-02-01 03:49 UTC: {fmt_int(peak['tpm_total'])} total TPM"
    )
    for graph_id in ("run-concurrency-graph", "run-ttft-graph", "run-balance-graph"):
        assert wait_graph(browser, graph_id)["traces"], graph_id
    screenshot(browser, output_dir, "run-page")

    # Switch to completion tokens: bars and the peak mark change.
    _switch(browser, "Completion (output)")
    figure = wait_graph(browser, "run-throughput-graph", lambda f: "Completion" in f["yTitle"])
    assert _bars_per_minute(figure) == _expected(seeded, "completion")
    assert annotation(figure, "peak") == (
        "peak completion minute 2026-02-01 03:52 UTC: "
        f"{fmt_int(peak_completion['completion_tpm_out'])} completion TPM"
    )
    _switch(browser, "Prompt (input)")
    figure = wait_graph(browser, "run-throughput-graph", lambda f: "Prompt" in f["yTitle"])
    assert _bars_per_minute(figure) == _expected(seeded, "prompt")
    screenshot(browser, output_dir, "run-page-prompt")

    # Provenance: digests of the snapshot, download links on the read API, verify command.
    assert text_of(browser, "run-prov-seal") == seeded.seal
    assert text_of(browser, "run-prov-events-sha256") == seeded.metrics["events_sha256"]
    links = [
        a.get_attribute("href")
        for a in browser.find_elements(By.CSS_SELECTOR, "#run-prov-downloads a")
    ]
    assert links == [
        f"{API_BASE_URL}/v1/runs/{quote(RUN_ID)}/events.jsonl",
        f"{API_BASE_URL}/v1/runs/{quote(RUN_ID)}/summary",
        f"{API_BASE_URL}/v1/keys",
        f"{API_BASE_URL}/v1/keys/current.pem",
    ]
    assert f"tpmledger summary verify -- ./{RUN_ID}-summary" in text_of(browser, "run-prov-verify")

    # Dark mode: the switch sets Bootstrap's colour mode; charts have no fixed background.
    browser.find_element(By.CSS_SELECTOR, "#theme-dark").click()
    theme = "return document.documentElement.getAttribute('data-bs-theme')"
    wait_for(lambda: browser.execute_script(theme) == "dark", timeout=PAGE_WAIT_S)
    screenshot(browser, output_dir, "run-page-dark")


def test_not_measured_figures_say_so(
    page_database_url: str, dashboard_server: RunningDashboard, browser: Any, output_dir: Path
) -> None:
    seed_sealed_run(page_database_url, "bare", with_retries=False, with_ttft=False)
    browser.get(f"{dashboard_server.url}/runs/bare")
    assert wait_text(browser, "run-kpi-retry-value") == "not measured"
    assert text_of(browser, "run-kpi-ttft-value") == "not measured"
    ttft = wait_graph(browser, "run-ttft-graph")
    assert not ttft["traces"]
    assert ttft["annotations"][0]["text"].startswith("TTFT: not measured")
    throughput = wait_graph(browser, "run-throughput-graph")
    assert "retry rate" not in {t["name"] for t in throughput["traces"]}
    assert annotation(throughput, "not-measured") == "retry rate: not measured"
    screenshot(browser, output_dir, "run-not-measured")


def test_live_run_refreshes_until_sealed(
    page_database_url: str, dashboard_server: RunningDashboard, browser: Any, output_dir: Path
) -> None:
    seeded = seed_sealed_run(page_database_url, "live-run", live=True)
    browser.get(f"{dashboard_server.url}/runs/live-run")
    assert wait_text(browser, "run-status") == "live — provisional"
    assert text_of(browser, "run-freshness").startswith("Live, provisional figures · data as of")
    assert text_of(browser, "run-kpi-peak-total-value") == fmt_int(
        seeded.metrics["peak_minute"]["tpm_total"]
    )

    # Analytics reseals with new data: the open page picks it up on its refresh interval.
    reseal(page_database_url, seeded, peak_total=123_456)
    wait_for(lambda: text_of(browser, "run-kpi-peak-total-value") == "123,456", timeout=PAGE_WAIT_S)
    wait_for(lambda: text_of(browser, "run-status") == "sealed", timeout=PAGE_WAIT_S)
    assert "v2" in text_of(browser, "run-header")
    screenshot(browser, output_dir, "run-live-resealed")


def test_unknown_run_says_so(
    page_database_url: str, dashboard_server: RunningDashboard, browser: Any
) -> None:
    browser.get(f"{dashboard_server.url}/runs/nope")
    assert "No run named 'nope'" in wait_text(browser, "run-not-found")


def test_pitfall_diagnostics_are_shown_from_the_sealed_version(
    page_database_url: str, dashboard_server: RunningDashboard, browser: Any, output_dir: Path
) -> None:
    from tests.analytics.pitfall_runs import storm_rows
    from tests.analytics.seeding import store
    from tpmledger.analytics.seal.sealing import seal_run

    store(page_database_url, storm_rows("storm-page", {2, 3}))
    seal_run(page_database_url, "storm-page")
    browser.get(f"{dashboard_server.url}/runs/storm-page")
    wait_for(lambda: "retry storm" in text_of(browser, "run-diagnostics"), timeout=PAGE_WAIT_S)
    card = text_of(browser, "run-diagnostics")
    assert "YES in 2 minute(s) over the 20 % retry budget: 03:46, 03:47 UTC" in card, card
    assert "not measured (no attempt declares a deadline or request timeout)" in card
    assert "not measured (the run stored no tool span)" in card
    assert "no SLO declared" in card
    screenshot(browser, output_dir, "run-page-diagnostics")


def test_a_run_id_with_a_newline_or_a_leading_dash_has_a_run_page(
    page_database_url: str, dashboard_server: RunningDashboard, browser: Any
) -> None:
    expected = {
        "line\nbreak": "tpmledger verify -- $'line\\nbreak'",
        "--help": "tpmledger verify -- --help",
    }
    for run_id, command in expected.items():
        seed_sealed_run(page_database_url, run_id, shards=3)
        browser.get(f"{dashboard_server.url}/runs/{quote(run_id, safe='')}")
        assert wait_text(browser, "run-kpi-shards-value") == "3", run_id
        assert command in text_of(browser, "run-prov-verify"), run_id
