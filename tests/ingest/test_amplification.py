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
