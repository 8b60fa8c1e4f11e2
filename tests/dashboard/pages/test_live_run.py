"""A run still receiving spans, end to end: real OTel SDK exporter → ingest → analytics
worker's live loop → dashboard in a real Chromium. Nothing is sealed during the test
(quiet period of an hour), so every figure shown comes from the live minute table."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.dashboard.browser_helpers import (
    PAGE_WAIT_S,
    screenshot,
    table_cells,
    text_of,
    wait_graph,
    wait_text,
)
from tests.dashboard.conftest import RunningDashboard
from tests.fixtures.servers import RunningIngest, start_ingest, terminate, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]
RUN_ID = "live-fleet"


class Fleet:
    """Two shards exporting one LLM span every 50 ms each until stopped."""

    def __init__(self, endpoint: str) -> None:
        self.stop = threading.Event()
        self.sent = 0
        self.providers = []
        for shard in ("0", "1"):
            resource = Resource.create(
                {
                    "tpmledger.run.id": RUN_ID,
                    "tpmledger.shard.id": shard,
                    "tpmledger.shard.count": 2,
                    "tpmledger.concurrency.cap": 4,
                }
            )
            provider = TracerProvider(resource=resource)
            exporter = OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", timeout=30)
            provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=300))
            self.providers.append(provider)
        self.thread = threading.Thread(target=self._send, daemon=True)

    def _send(self) -> None:
        tracers = [p.get_tracer("shard-worker") for p in self.providers]
        while not self.stop.is_set():
            now = time.time_ns()
            for tracer in tracers:
                span = tracer.start_span("chat gpt-test", start_time=now - 1_500_000_000)
                span.set_attribute("gen_ai.operation.name", "chat")
                span.set_attribute("gen_ai.usage.input_tokens", 300)
                span.set_attribute("gen_ai.usage.output_tokens", 120)
                span.set_attribute("gen_ai.response.time_to_first_chunk", 0.25)
                span.set_attribute("tpmledger.queue.wait_s", 0.1)
                span.end(end_time=now)
                self.sent += 1
            self.stop.wait(0.05)

    def __enter__(self) -> Fleet:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        for provider in self.providers:
            provider.shutdown()


@pytest.fixture(scope="module")
def ingest(page_database_url: str) -> Iterator[RunningIngest]:
    server = start_ingest(page_database_url)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def analytics_worker(page_database_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """``tpmledger serve analytics`` with an hour's quiet period: live figures only."""
    log = tempfile.NamedTemporaryFile(prefix="analytics-", suffix=".log", delete=False)  # noqa: SIM115
    env = {
        **os.environ,
        "TPMLEDGER_DATABASE_URL": page_database_url,
        "TPMLEDGER_RESEAL_QUIET_S": "3600",
        "PYTHONUNBUFFERED": "1",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "tpmledger.cli.main", "serve", "analytics"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield process
    finally:
        terminate(process)
        log.close()
        Path(log.name).unlink(missing_ok=True)


def _attempts_in_header(browser: Any) -> int:
    header = text_of(browser, "run-header")
    return int(header.split(" attempts")[0].split()[-1].replace(",", ""))


def test_a_running_fleet_shows_live_figures_that_keep_moving(
    ingest: RunningIngest,
    analytics_worker: subprocess.Popen[bytes],
    dashboard_server: RunningDashboard,
    browser: Any,
    output_dir: Path,
) -> None:
    with Fleet(ingest.http_url) as fleet:
        wait_for(lambda: fleet.sent > 40, timeout=30)
        browser.get(f"{dashboard_server.url}/runs/{RUN_ID}")
        assert wait_text(browser, "run-status", timeout=PAGE_WAIT_S) == "live — provisional"
        wait_for(lambda: text_of(browser, "run-kpi-peak-total-value") not in ("", "not measured"),
                 timeout=PAGE_WAIT_S, interval=0.5)  # fmt: skip
        assert text_of(browser, "run-freshness").startswith(
            "Live, provisional figures · data as of"
        )
        # Every figure is live: TTFT from the minutes' sketches, saying its accuracy.
        wait_for(lambda: text_of(browser, "run-kpi-ttft-value").endswith("ms"), timeout=PAGE_WAIT_S)
        assert "within ±1 %" in text_of(browser, "run-kpi-ttft-detail")
        throughput = wait_graph(browser, "run-throughput-graph")
        bars = {t["name"] for t in throughput["traces"] if t["type"] == "bar"}
        # Every minute of this young run is still open: drawn in progress, labelled so.
        assert bars <= {"shard 0", "shard 1", "shard 0 (in progress)", "shard 1 (in progress)",
                        "in progress (open minute)"}  # fmt: skip
        assert {"shard 0 (in progress)", "shard 1 (in progress)"} <= bars
        concurrency = wait_graph(browser, "run-concurrency-graph")
        assert concurrency["traces"]
        seen = _attempts_in_header(browser)
        # Still sending: the page's refresh shows more attempts without a reload.
        wait_for(lambda: _attempts_in_header(browser) > seen, timeout=PAGE_WAIT_S, interval=0.5)
        screenshot(browser, output_dir, "run-page-live")

        minutes = httpx.get(f"{ingest.http_url}/v1/runs/{RUN_ID}/minutes", timeout=10).json()
        assert minutes["minutes"][-1]["state"] == "open"
        run = httpx.get(f"{ingest.http_url}/v1/runs/{RUN_ID}", timeout=10).json()
        assert run["live"] is True and run["seal"] is None and run["attempts"] > 0

        browser.get(dashboard_server.url + "/")
        wait_for(lambda: any(c and c[0] == RUN_ID for c in table_cells(
            browser, "#runs-table-grid tbody tr")), timeout=PAGE_WAIT_S)  # fmt: skip
        row = next(c for c in table_cells(browser, "#runs-table-grid tbody tr") if c[0] == RUN_ID)
        assert row[1].startswith("live — provisional") and "data as of" in row[1]
        # Peak TPM from closed minutes only: a number, or the first minutes still in progress.
        peak = row[4].split("\n")[0]
        assert peak.replace(",", "").isdigit() or peak == "first minutes in progress"
        screenshot(browser, output_dir, "runs-page-live")
