"""Ingest scraping server endpoints (TPMLEDGER_SCRAPE_TARGETS): a hanging target never
slows span ingest, and each target's state is on /metrics
(docs/metrics.md#serving-side-metrics)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.analytics.bottleneck_runs import RunSpec, base_minute_ns, record_run
from tests.analytics.verdicts.test_bottleneck import export
from tests.fixtures.model_server_metrics import EngineFigures, FakeModelServer
from tests.fixtures.servers import start_ingest


@pytest.fixture
def hanging_url() -> Iterator[str]:
    """Accepts connections (the kernel does) and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/metrics"
    listener.close()


@pytest.mark.slow
def test_a_hanging_target_leaves_ingest_alone(database_url: str, hanging_url: str) -> None:
    vllm = FakeModelServer("vllm", engines=[EngineFigures(running=2, waiting=1)]).start()
    ingest = start_ingest(
        database_url,
        env={
            "TPMLEDGER_SCRAPE_TARGETS": f"{hanging_url}, {vllm.url}",
            "TPMLEDGER_SCRAPE_INTERVAL_S": "1",
            "TPMLEDGER_SCRAPE_TIMEOUT_S": "30",  # capped at the interval
        },
    )
    try:
        spans = record_run(RunSpec("beside-a-hang", lanes=4), base_minute_ns())
        began = time.monotonic()
        export(spans, ingest)  # 144 spans, a few requests
        assert time.monotonic() - began < 3.0
        deadline = time.monotonic() + 15
        while True:
            text = httpx.get(f"{ingest.http_url}/metrics", timeout=10).text
            if f'tpmledger_scrape_up{{target="{hanging_url}"}} 0.0' in text:
                break
            assert time.monotonic() < deadline, text
            time.sleep(0.3)
        assert f'tpmledger_scrape_up{{target="{vllm.url}"}} 1.0' in text
        assert f'tpmledger_scrape_errors_total{{stage="fetch",target="{hanging_url}"}}' in text
        assert f'tpmledger_scrape_last_success_timestamp_seconds{{target="{vllm.url}"}}' in text
        stored = httpx.get(f"{ingest.http_url}/v1/runs/beside-a-hang", timeout=30)
        assert stored.status_code == 200
    finally:
        ingest.stop()
        vllm.stop()
