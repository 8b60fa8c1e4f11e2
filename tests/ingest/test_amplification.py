"""A few kilobytes must not cost gigabytes, nor freeze the event loop (docs/ingest.md#limits).

Issue 41 reproduction: 15 KB of gzip'd OTLP/JSON holding 5.2 M empty spans took 2.2 GiB
and ``/healthz`` did not answer for over 60 s (parsed in the listener's event loop); a
14.6 KB protobuf body of 7.5 M empty spans took a worker to 1,018 MiB and 123 s of CPU;
the metrics and logs variants 707-874 MiB with the loop blocked 52-68 s. Every probe is
now counted before it is decoded and refused with 413; ingest (listener and workers)
stays under 300 MB and ``/healthz`` answers within a second throughout.
"""

from __future__ import annotations

import threading
import time

import httpx
import psutil
import pytest

from tests.fixtures.servers import RunningIngest
from tests.ingest.otlp_builders import export_request, llm_span
from tests.ingest.probe_bodies import probes
from tpmledger.ingest.error_taxonomy import PayloadTooLarge
from tpmledger.ingest.request_limits import MAX_ATTRIBUTES, MAX_ITEMS, count_request


class HealthWatch(threading.Thread):
    """Asks ``/healthz`` every 50 ms; keeps the slowest answer (a timeout counts as 5 s)."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.slowest = 0.0
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self.stop.is_set():
                started = time.monotonic()
                try:
                    ok = client.get(f"{self.url}/healthz").status_code == 200
                except httpx.HTTPError:
                    ok = False
                took = time.monotonic() - started if ok else 5.0
                self.slowest = max(self.slowest, took)
                time.sleep(0.05)


def _rss(pid: int) -> int:
    process = psutil.Process(pid)
    return process.memory_info().rss + sum(
        child.memory_info().rss for child in process.children(recursive=True)
    )


def test_counts_are_checked_before_decoding() -> None:
    good = export_request([llm_span() for _ in range(3)]).SerializeToString()
    counts = count_request(good, "traces", json=False)
    assert counts.items == 3 and counts.attributes >= 12
    with pytest.raises(PayloadTooLarge, match="spans"):
        count_request(good, "traces", json=False, max_items=2)
    with pytest.raises(PayloadTooLarge, match="attributes"):
        count_request(good, "traces", json=False, max_attributes=5)
    assert MAX_ITEMS >= 8_192 and MAX_ATTRIBUTES >= 8_192 * 32


@pytest.mark.slow
def test_amplification_probes_are_refused_early_and_healthz_answers(
    running_ingest: RunningIngest,
) -> None:
    server = running_ingest
    watch = HealthWatch(server.http_url)
    watch.start()
    peak = 0
    try:
        for name, path, media, body in probes():
            answer = httpx.post(
                f"{server.http_url}{path}",
                content=body,
                headers={"Content-Type": media, "Content-Encoding": "gzip"},
                timeout=60,
            )
            assert answer.status_code == 413, (name, answer.status_code, answer.text)
            assert "smaller batches" in answer.text, name
            peak = max(peak, _rss(server.process.pid))
        # Honest exports are still stored.
        ok = httpx.post(
            f"{server.http_url}/v1/traces",
            content=export_request([llm_span()], run_id="after-probes").SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"},
            timeout=30,
        )
        assert ok.status_code == 200
    finally:
        watch.stop.set()
        watch.join()
    assert watch.slowest < 1.0, f"/healthz took {watch.slowest:.2f} s"
    assert peak < 300 * 2**20, f"ingest reached {peak / 2**20:.0f} MiB"


def test_real_sdk_requests_of_every_signal_are_counted_exactly() -> None:
    """The wire walk follows each point type's own field numbers (a histogram's explicit
    bounds are not attributes): what the SDK sends counts exactly, and walks whole."""
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogExporter, SimpleLogRecordProcessor
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create({"tpmledger.run.id": "r"})
    reader = InMemoryMetricReader()
    meter = MeterProvider(resource=resource, metric_readers=[reader]).get_meter("t")
    meter.create_histogram("h").record(5, {"a": 1, "b": 2})
    meter.create_counter("c").add(3, {"a": 1})
    meter.create_up_down_counter("u").add(-1, {"a": 1, "b": [1, 2]})
    body = encode_metrics(reader.get_metrics_data()).SerializeToString()
    counts = count_request(body, "metrics", json=False)
    assert not counts.unwalkable
    resource_attributes = len(resource.attributes)
    # Three points; their attributes (the array's two elements count too) and the resource's.
    assert counts.items == 3
    assert counts.attributes == 2 + 1 + 2 + 2 + resource_attributes

    logs = InMemoryLogExporter()
    provider = LoggerProvider(resource=resource)
    provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    provider.get_logger("t").emit(body="hello", attributes={"k": "v"})  # type: ignore[call-arg]
    body = encode_logs(logs.get_finished_logs()).SerializeToString()
    counts = count_request(body, "logs", json=False)
    assert not counts.unwalkable and counts.items == 1
    assert counts.attributes == 1 + resource_attributes
