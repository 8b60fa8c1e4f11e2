"""One shard against the real simulated server: one span per try, docs/conventions.md attributes,
retries."""

from __future__ import annotations

import asyncio
import functools
import itertools
import signal
from collections import defaultdict
from collections.abc import Callable, Iterator
from unittest import mock

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tpmledger.simulator.config import ServerConfig, ShardConfig
from tpmledger.simulator.counters import ShardCounters
from tpmledger.simulator.server_process import running_llm_server
from tpmledger.simulator.shard_process import run_shard
from tpmledger.simulator.shard_worker import ShardWorker
from tpmledger.simulator.telemetry import build_tracer_provider


@pytest.fixture(scope="module")
def flaky_server() -> Iterator[str]:
    """Fast, unlimited budget, 30 % of answers 5xx: plenty of retries in a second."""
    config = ServerConfig(speed=20.0, error_rate=0.3, timeout_rate=0.0, capacity_tpm=10**9)
    with running_llm_server(config) as url:
        yield url


def _run(
    config: ShardConfig, stop_after_s: float | None = None
) -> tuple[list[ReadableSpan], ShardCounters, int]:
    exporter = InMemorySpanExporter()
    provider, counting = build_tracer_provider(config, exporter=exporter)
    counters = ShardCounters()
    worker = ShardWorker(config, provider.get_tracer("test"), counters)

    async def go() -> None:
        if stop_after_s is None:
            await run_shard(config, worker, counting)
            return
        # The handlers run_shard installs are recorded, not installed, and the SIGTERM one
        # is then called as the loop would call it: signalling this process instead would
        # end the whole pytest run whenever run_shard failed to install a handler.
        handlers: dict[int, Callable[[], object]] = {}

        def record(sig: int, callback: Callable[..., object], *args: object) -> None:
            handlers[sig] = functools.partial(callback, *args)

        with mock.patch.object(asyncio.get_running_loop(), "add_signal_handler", record):
            task = asyncio.create_task(run_shard(config, worker, counting))
            await asyncio.sleep(stop_after_s)
            assert set(handlers) == {signal.SIGTERM, signal.SIGINT}
            handlers[signal.SIGTERM]()
            await task

    asyncio.run(go())
    provider.force_flush()
    provider.shutdown()
    return list(exporter.get_finished_spans()), counters, counting.exported


def _config(url: str, **overrides: object) -> ShardConfig:
    values: dict[str, object] = {
        "run_id": "run_a",
        "shard_id": 2,
        "shard_count": 4,
        "concurrency": 3,
        "sweep_id": "sweep_a",
        "duration_s": 1.5,
        "llm_url": url,
        "otlp_endpoint": "http://unused",
        "retry_backoff_s": 0.01,
        "max_attempts": 5,
        **overrides,
    }
    return ShardConfig.model_validate(values)


def _max_overlap(spans: list[ReadableSpan]) -> int:
    edges = sorted(
        [(s.start_time, 1) for s in spans] + [(s.end_time, -1) for s in spans],
        key=lambda e: (e[0], e[1]),
    )
    level = peak = 0
    for _, step in edges:
        level += step
        peak = max(peak, level)
    return peak


def test_spans_cover_slot_holds_with_run_identity_and_outcomes(flaky_server: str) -> None:
    spans, counters, exported = _run(_config(flaky_server))
    assert spans and len(spans) == counters.attempts == counters.spans_ended == exported
    assert counters.calls_started == (
        counters.calls_ok + counters.calls_failed + counters.calls_unfinished
    )
    resource = spans[0].resource.attributes
    assert resource["tpmledger.run.id"] == "run_a"
    assert resource["tpmledger.shard.id"] == "2"
    assert resource["tpmledger.shard.count"] == 4
    assert resource["tpmledger.concurrency.cap"] == 3
    assert resource["tpmledger.sweep.id"] == "sweep_a"
    assert resource["service.name"] == "tpmledger-simulator"
    # start = admitted, end = released: never more spans open at once than the cap.
    assert _max_overlap(spans) <= 3
    assert any(s.attributes["tpmledger.queue.wait_s"] > 0 for s in spans)  # backlog 2 × cap
    ok = [s for s in spans if s.status.status_code != StatusCode.ERROR]
    failed = [s for s in spans if s.status.status_code == StatusCode.ERROR]
    assert ok and failed
    for span in spans:
        a = span.attributes
        assert span.kind == SpanKind.CLIENT and span.start_time < span.end_time
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.request.model"] == "sim-chat-1"
        assert str(a["tpmledger.call.id"]).startswith("run_a/shard2/call")
    for span in failed:
        assert span.attributes["error.type"] in ("500", "502", "503")
        assert span.attributes["http.response.status_code"] == int(span.attributes["error.type"])
        assert "gen_ai.usage.input_tokens" not in span.attributes
    for span in ok:
        a = span.attributes
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
        assert a["gen_ai.response.model"] == "sim-chat-1"
        assert set(a["gen_ai.response.finish_reasons"]) <= {"stop", "length"}
    assert any("gen_ai.response.time_to_first_chunk" in s.attributes for s in ok)  # streams
    assert sum(s.attributes["gen_ai.usage.input_tokens"] for s in ok) == counters.prompt_tokens


def test_retries_share_the_call_id_and_count_resends_from_one(flaky_server: str) -> None:
    spans, counters, _ = _run(_config(flaky_server))
    by_call: dict[str, list[ReadableSpan]] = defaultdict(list)
    for span in spans:
        by_call[str(span.attributes["tpmledger.call.id"])].append(span)
    retried = 0
    for tries in by_call.values():
        tries.sort(key=lambda s: s.start_time)
        # semconv: absent on the first try, then 1, 2, ...
        assert "http.request.resend_count" not in tries[0].attributes
        resends = [s.attributes.get("http.request.resend_count") for s in tries[1:]]
        assert resends == list(range(1, len(tries)))
        assert all(s.status.status_code == StatusCode.ERROR for s in tries[:-1])
        assert all(a.end_time <= b.start_time for a, b in itertools.pairwise(tries))
        retried += len(tries) > 1
    assert retried > 0
    assert counters.retries == sum(len(t) - 1 for t in by_call.values())


def test_retry_waits_at_least_what_retry_after_asks() -> None:
    # 1,000 tokens/s and a 0.5 s bucket: a ~750-token request waits ~0.75 s after a 429.
    config = ServerConfig(speed=20.0, error_rate=0.0, timeout_rate=0.0, capacity_tpm=60_000)
    config = config.model_copy(update={"burst_s": 0.5})
    with running_llm_server(config) as url:
        spans, counters, _ = _run(_config(url, retry_backoff_s=0.001, duration_s=2.0))
    assert counters.rate_limited > 0
    by_call: dict[str, list[ReadableSpan]] = defaultdict(list)
    for span in spans:
        by_call[str(span.attributes["tpmledger.call.id"])].append(span)
    gaps = []
    for tries in by_call.values():
        tries.sort(key=lambda s: s.start_time)
        for before, after in itertools.pairwise(tries):
            if before.attributes.get("error.type") == "429":
                gaps.append((after.start_time - before.end_time) / 1e9)
    assert gaps and min(gaps) >= 0.05  # our own backoff alone would be 1–16 ms


def test_stop_cancels_tries_in_flight_and_still_exports_them() -> None:
    slow = ServerConfig(speed=1.0, error_rate=0.0, timeout_rate=0.0, capacity_tpm=10**9)
    with running_llm_server(slow) as url:
        spans, counters, exported = _run(_config(url, duration_s=60.0), stop_after_s=0.8)
    cancelled = [s for s in spans if s.attributes.get("error.type") == "cancelled"]
    assert len(cancelled) == 3  # every slot was busy with a multi-second call
    assert all(s.status.status_code == StatusCode.ERROR for s in cancelled)
    assert exported == len(spans) == counters.spans_ended
    assert counters.calls_unfinished >= 3


def test_rate_limit_headers_become_span_attributes_as_string_arrays() -> None:
    """A provider quota far below the shard's demand: 429s, and every answer's x-ratelimit-*
    headers recorded the way HTTP instrumentations capture response headers."""
    config = ServerConfig(
        speed=20.0, error_rate=0.0, timeout_rate=0.0, capacity_tpm=10**9, quota_tpm=3_000
    )
    with running_llm_server(config) as url:
        spans, counters, _ = _run(_config(url, duration_s=1.0, retry_backoff_s=0.5))
    header = "http.response.header."
    limited = [s for s in spans if s.attributes.get("http.response.status_code") == 429]
    assert limited and counters.rate_limited == len(limited)
    for span in spans:
        a = span.attributes
        if a.get("error.type") == "cancelled":
            continue
        assert a[header + "x-ratelimit-limit-tokens"] == ("3000",)
        assert int(a[header + "x-ratelimit-remaining-tokens"][0]) >= 0
    for span in limited:
        assert int(span.attributes[header + "retry-after"][0]) >= 1
