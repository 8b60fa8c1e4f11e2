"""The servers' newest closed minute on /metrics, and the saturation the alert reads
(docs/operations.md#serving-side-series)."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.fixtures.model_server_metrics import EngineFigures, FakeModelServer
from tests.fixtures.servers import RunningIngest
from tpmledger.durations import MINUTE_NS, SECOND_NS
from tpmledger.ingest.server_scraper import ServerScraper

#: The test's scrapes and its /metrics read must fall in one wall-clock minute: when the
#: next one begins, the minute scraped "now" closes and becomes the newest closed minute.
NEEDS_S = 30


def _start_early_in_a_minute(needs_s: float = NEEDS_S) -> None:
    """Wait for the next minute when fewer than ``needs_s`` seconds are left in this one."""
    left_s = (MINUTE_NS - time.time_ns() % MINUTE_NS) / SECOND_NS
    if left_s < needs_s:
        time.sleep(left_s + 0.5)


@pytest.mark.slow
def test_metrics_show_each_servers_last_closed_minute(running_ingest: RunningIngest) -> None:
    _start_early_in_a_minute()
    minute = time.time_ns() // MINUTE_NS
    closed = (minute - 1) * MINUTE_NS + 5 * SECOND_NS
    full = FakeModelServer(
        "vllm", model="big", engines=[EngineFigures(running=8, waiting=3, kv_cache=0.95)]
    ).start()
    calm = FakeModelServer(
        "sglang", model="small", engines=[EngineFigures(running=1, kv_cache=0.3)]
    ).start()
    try:
        scraper = ServerScraper(
            running_ingest.database_url, [full.url, calm.url], clock=lambda: closed
        )
        scraper.scrape_once(full.url)
        scraper.scrape_once(calm.url)
        # The open minute is not shown (it would read as a drop while it fills).
        scraper._clock = time.time_ns
        full.engines[0].waiting = 0
        scraper.scrape_once(full.url)
    finally:
        full.stop()
        calm.stop()
    text = httpx.get(f"{running_ingest.http_url}/metrics", timeout=30).text
    assert time.time_ns() // MINUTE_NS == minute, f"took over {NEEDS_S} s: a minute closed"
    big = f'{{engine="vllm",model="big",server="{full.instance}"}}'
    small = f'{{engine="sglang",model="small",server="{calm.instance}"}}'
    assert f"tpmledger_server_saturated{big} 1.0" in text
    assert f"tpmledger_server_saturated{small} 0.0" in text
    assert f"tpmledger_server_requests_waiting{big} 3.0" in text
    assert f"tpmledger_server_kv_cache_usage_ratio{big} 0.95" in text
    assert f"tpmledger_server_requests_running{small} 1.0" in text
    assert f"tpmledger_server_preemptions{big}" not in text  # only a baseline: not measured
