"""Overload (docs/ingest.md "Overload (bounded queue full) → 503 with Retry-After", memory
target in README.md#benchmarks).

The queue bound is made tiny through ``TPMLEDGER_QUEUE_MAX_SPANS``; many concurrent
senders each push new spans. Some requests must be refused with 503 + Retry-After, the
queue gauge must never pass the bound, and once every sender has retried after the
advertised delay, every span is stored exactly once. The process RSS stays sane.
"""

from __future__ import annotations

import re
import threading
import time

import httpx
import psutil
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from tests.fixtures.fault_servers import batches, llm_spans, span_ids, stored_ids
from tests.fixtures.servers import start_ingest

pytestmark = pytest.mark.slow

QUEUE_MAX_SPANS = 300
SENDERS = 16
REQUESTS_PER_SENDER = 4
BATCH = 100
_QUEUE_GAUGE = re.compile(rb"^tpmledger_ingest_queue_depth_spans (\S+)$", re.MULTILINE)


class Sender(threading.Thread):
    """Posts its bodies one after another; on 503 waits Retry-After and re-sends."""

    def __init__(self, url: str, bodies: list[bytes]) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.bodies = bodies
        self.refused = 0
        self.refused_without_retry_after = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            with httpx.Client(timeout=60) as client:
                for body in self.bodies:
                    self._deliver(client, body)
        except BaseException as exc:
            self.error = exc

    def _deliver(self, client: httpx.Client, body: bytes) -> None:
        headers = {"Content-Type": "application/x-protobuf"}
        while True:
            response = client.post(f"{self.url}/v1/traces", content=body, headers=headers)
            if response.status_code == 200:
                return
            assert response.status_code == 503, (response.status_code, response.text)
            self.refused += 1
            retry_after = response.headers.get("Retry-After")
            if retry_after is None:
                self.refused_without_retry_after += 1
            time.sleep(float(retry_after or 1))


def test_overload_refuses_with_retry_after_and_loses_nothing(database_url: str) -> None:
    server = start_ingest(
        database_url,
        env={"TPMLEDGER_QUEUE_MAX_SPANS": str(QUEUE_MAX_SPANS), "TPMLEDGER_RETRY_AFTER_S": "1"},
    )
    spans = llm_spans(SENDERS * REQUESTS_PER_SENDER * BATCH)
    bodies = [encode_spans(b).SerializeToString() for b in batches(spans, BATCH)]
    senders = [Sender(server.http_url, bodies[i::SENDERS]) for i in range(SENDERS)]
    peak_queue = 0.0
    peak_rss = 0
    try:
        process = psutil.Process(server.process.pid)
        for sender in senders:
            sender.start()
        while any(s.is_alive() for s in senders):
            metrics = httpx.get(f"{server.http_url}/metrics", timeout=10).content
            match = _QUEUE_GAUGE.search(metrics)
            assert match, "queue depth gauge missing from /metrics"
            peak_queue = max(peak_queue, float(match.group(1)))
            peak_rss = max(peak_rss, process.memory_info().rss)
            time.sleep(0.02)
        assert server.process.poll() is None, server.log()
    finally:
        server.stop()
    assert [s.error for s in senders if s.error] == []
    refused = sum(s.refused for s in senders)
    assert refused > 0, "the tiny queue must refuse some requests"
    assert sum(s.refused_without_retry_after for s in senders) == 0
    assert peak_queue <= QUEUE_MAX_SPANS
    assert peak_rss < 300 * 2**20
    count, ids = stored_ids(database_url)
    assert count == len(spans)
    assert ids == span_ids(spans)
