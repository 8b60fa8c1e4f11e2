"""End to end without fixtures standing in for analytics: attempts stored by the bulk
writer, sealed by ``analytics.sealing.seal_run``, then shown by the run and runs pages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.browser_helpers import annotation, screenshot, text_of, wait_graph, wait_text
from tests.dashboard.conftest import RunningDashboard
from tests.storage.builders import BASE_NS, MINUTE_NS, attempt_row
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.dashboard.display import fmt_int, fmt_rate
from tpmledger.storage.server.database import raw_transaction
from tpmledger.storage.writers.bulk_writer import write_attempts

pytestmark = pytest.mark.browser
RUN_ID = "sealed-by-analytics"


def _attempts() -> list[tuple[Any, ...]]:
    """3 shards over 4 minutes; minute 2 is the busiest; a few retried failures."""
    rows = []
    for minute in range(4):
        for shard in range(3):
            calls = 6 if minute == 2 else 3
            for i in range(calls):
                end = BASE_NS + minute * MINUTE_NS + (i + 1) * 5_000_000_000
                failed = minute == 1 and shard == 0 and i == 0
                rows.append(
                    attempt_row(
                        run_id=RUN_ID,
                        shard_id=str(shard),
                        start_ns=end - 2_000_000_000,
                        end_ns=end,
                        prompt_tokens=None if failed else 100 * (shard + 1),
                        completion_tokens=None if failed else 40,
                        status="error" if failed else "ok",
                        error_type="http_429" if failed else None,
                        http_status=429 if failed else 200,
                        resend_count=1 if i == 1 else 0,
                        ttft_s=0.2 + 0.05 * shard,
                        queue_wait_s=0.0,
                    )
                )
    return rows


def test_pages_show_what_analytics_sealed(
    page_database_url: str, dashboard_server: RunningDashboard, browser: Any, output_dir: Path
) -> None:
    with raw_transaction(page_database_url) as conn:
        write_attempts(conn, _attempts())
    metrics = seal_run(page_database_url, RUN_ID).metrics
    peak = metrics["peak_minute"]

    browser.get(f"{dashboard_server.url}/runs/{RUN_ID}")
    assert wait_text(browser, "run-kpi-peak-total-value") == fmt_int(peak["tpm_total"])
    assert text_of(browser, "run-kpi-shards-value") == str(metrics["shard_count"]) == "3"
    assert text_of(browser, "run-kpi-retry-value") == fmt_rate(metrics["retry_rate"])
    assert text_of(browser, "run-kpi-success-value") == fmt_rate(metrics["call_success_rate"])

    figure = wait_graph(browser, "run-throughput-graph")
    bars = [t for t in figure["traces"] if t["type"] == "bar"]
    assert len(bars) == 3
    peak_x = peak["minute_utc"][:16].replace("T", " ")
    stacked = sum(y for t in bars for x, y in zip(t["x"], t["y"], strict=True) if x == peak_x)
    assert stacked == peak["tpm_total"]
    assert f"{fmt_int(peak['tpm_total'])} total TPM" in (annotation(figure, "peak") or "")
    assert text_of(browser, "run-prov-seal") == metrics["seal"]
    screenshot(browser, output_dir, "run-sealed-by-analytics")

    browser.get(dashboard_server.url + "/")
    assert RUN_ID in wait_text(browser, "runs-table-grid")
