"""gRPC calls beyond the concurrency limit wait their turn; refusals carry RetryInfo
(docs/ingest.md#answers).

Issue 41 reproduction: above 8 concurrent calls ingest answered ``RESOURCE_EXHAUSTED``
without RetryInfo (the docs said extra calls wait); 16 shards flushing together lost 23
of 80 exports on the first try, and Go / Collector exporters drop a batch on that code.
"""

from __future__ import annotations

import asyncio
import threading

import grpc
import pytest
from google.rpc import error_details_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.fixtures.servers import RunningIngest
from tests.ingest.otlp_builders import export_request, llm_span
from tests.ingest.stored_rows import stored_count
from tests.ingest.test_grpc_ingest import export
from tests.ingest.test_http_ingest import recorded_llm_spans
from tpmledger.ingest.error_taxonomy import Overloaded
from tpmledger.ingest.grpc_server import CallQueue

SHARDS = 16


@pytest.mark.slow
def test_sixteen_simultaneous_raw_calls_all_succeed_on_the_first_try(
    running_ingest: RunningIngest,
) -> None:
    """No retry at all: every one of 16 calls at once waits its turn and is stored."""
    start = threading.Barrier(SHARDS)
    errors: list[BaseException] = []

    def call(shard: int) -> None:
        request = export_request([llm_span() for _ in range(200)], run_id=f"raw-{shard}")
        start.wait()
        try:
            export(running_ingest.grpc_endpoint, request)
        except grpc.RpcError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(SHARDS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert stored_count(running_ingest.database_url) == SHARDS * 200


@pytest.mark.slow
def test_a_sixteen_shard_flush_with_the_real_exporter_is_stored_whole(
    running_ingest: RunningIngest,
) -> None:
    rounds = 5
    batches = {
        shard: [recorded_llm_spans(str(shard), [(10, 5, False)] * 256) for _ in range(rounds)]
        for shard in range(SHARDS)
    }
    start = threading.Barrier(SHARDS)
    results: list[SpanExportResult] = []

    def flush(shard: int) -> None:
        exporter = OTLPSpanExporter(endpoint=running_ingest.grpc_endpoint, insecure=True)
        for spans in batches[shard]:
            start.wait()
            results.append(exporter.export(spans))
        exporter.shutdown()

    threads = [threading.Thread(target=flush, args=(i,)) for i in range(SHARDS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [SpanExportResult.SUCCESS] * (SHARDS * rounds)
    llm_spans = SHARDS * rounds * 256
    assert stored_count(running_ingest.database_url) == llm_spans


def test_a_full_queue_refuses_with_retry_info() -> None:
    async def scenario() -> Overloaded:
        queue = CallQueue(concurrent=1, queued=1, retry_after_s=3)
        held = asyncio.Event()
        release = asyncio.Event()

        async def first() -> None:
            async with queue.turn():
                held.set()
                await release.wait()

        async def second() -> None:
            async with queue.turn():
                pass

        tasks = [asyncio.create_task(first())]
        await held.wait()
        tasks.append(asyncio.create_task(second()))  # waits its turn
        await asyncio.sleep(0)
        with pytest.raises(Overloaded) as refused:
            async with queue.turn():
                pass
        release.set()
        await asyncio.gather(*tasks)
        return refused.value

    refusal = asyncio.run(scenario())
    assert refusal.grpc_code == grpc.StatusCode.UNAVAILABLE
    [detail] = refusal.to_status().details
    info = error_details_pb2.RetryInfo()
    assert detail.Unpack(info) and info.retry_delay.seconds == 3
