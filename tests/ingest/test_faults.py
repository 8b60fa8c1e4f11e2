"""Reliability under faults (README.md#benchmarks "Reliability", docs/ingest.md "200 means
committed", issue 9).

Real OpenTelemetry exporters (OTLP http/protobuf, and gRPC for half the senders of the
duplicate test) export LLM-call spans while PostgreSQL is killed and restarted, while the
ingest process is SIGKILLed and restarted, and while 10 % of the requests are sent twice.
Each client is durable: it re-exports a batch until it is acknowledged (the SDK exporter
alone gives up after its timeout). Afterwards every span sent must be stored exactly once:
the row count and the set of (trace_id, span_id) both equal what was sent, and the runs
table counts each attempt once.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan

from tests.fixtures.fault_servers import (
    ExportLoad,
    RestartablePostgres,
    batches,
    launch_ingest,
    llm_spans,
    run_attempts_total,
    span_ids,
    stored_ids,
)
from tests.fixtures.servers import RunningIngest, free_port, start_ingest, wait_for

pytestmark = pytest.mark.slow

SENDERS = 6
BATCH = 60
PACE_S = 0.1  # between one client's exports: keeps the load going while a fault lands


def http_exporters(http_url: str, count: int = SENDERS) -> list[OTLPSpanExporter]:
    return [OTLPSpanExporter(endpoint=f"{http_url}/v1/traces", timeout=5) for _ in range(count)]


def requests_for(spans: Sequence[ReadableSpan]) -> int:
    """Acknowledged exports of a whole ExportLoad: every batch, every 10th one twice."""
    count = len(batches(spans, BATCH))
    return count + len(range(0, count, 10))


def assert_stored_exactly_once(database_url: str, sent: Sequence[ReadableSpan]) -> None:
    count, ids = stored_ids(database_url)
    expected = span_ids(sent)
    assert len(expected) == len(sent)
    assert count == len(sent), f"{count} rows for {len(sent)} spans sent"
    assert ids == expected, f"missing {len(expected - ids)}, unexpected {len(ids - expected)}"
    assert run_attempts_total(database_url) == count


def test_duplicated_requests_store_every_span_once(running_ingest: RunningIngest) -> None:
    """10 % of requests sent twice over HTTP and gRPC, plus a full re-send at the end."""
    spans = llm_spans(4000)
    exporters = [
        *http_exporters(running_ingest.http_url, SENDERS // 2),
        *[
            GrpcSpanExporter(endpoint=running_ingest.grpc_endpoint, insecure=True, timeout=5)
            for _ in range(SENDERS // 2)
        ],
    ]
    load = ExportLoad(exporters, batches(spans, BATCH)).start()
    load.join(timeout=60)
    assert load.acknowledged == requests_for(spans)  # 10 % of the batches went twice

    # A client that lost every answer re-sends everything: still nothing new.
    body = encode_spans(spans[:BATCH]).SerializeToString()
    again = httpx.post(
        f"{running_ingest.http_url}/v1/traces",
        content=body,
        headers={"Content-Type": "application/x-protobuf"},
        timeout=30,
    )
    assert again.status_code == 200
    assert_stored_exactly_once(running_ingest.database_url, spans)


def test_sigkill_of_ingest_during_load_loses_nothing(database_url: str) -> None:
    """SIGKILL mid-load, restart on the same ports: acknowledged spans survive, the rest
    are re-sent by the clients, none is stored twice."""
    http_port, grpc_port = free_port(), free_port()
    server = launch_ingest(database_url, http_port, grpc_port)
    spans = llm_spans(6000)
    load = ExportLoad(http_exporters(server.http_url), batches(spans, BATCH), pace_s=PACE_S)
    try:
        load.start()
        wait_for(lambda: load.acknowledged >= 12, timeout=30)
        server.process.kill()
        server.process.wait(timeout=10)
        acknowledged_at_kill = load.acknowledged
        server.stop()
        server = launch_ingest(database_url, http_port, grpc_port)
        load.join(timeout=60)
    finally:
        server.stop()
    assert 0 < acknowledged_at_kill < requests_for(spans), "the kill must land mid-load"
    assert_stored_exactly_once(database_url, spans)


def test_postgres_restart_during_load_loses_nothing(
    restartable_postgres: RestartablePostgres,
) -> None:
    """PostgreSQL crashes (immediate stop) mid-load and comes back: ingest answers 503 with
    Retry-After meanwhile, stays up, reconnects; every span is stored once."""
    url = restartable_postgres.url("tpmledger")
    server = start_ingest(url)
    spans = llm_spans(6000)
    probe = llm_spans(1)
    load = ExportLoad(http_exporters(server.http_url), batches(spans, BATCH), pace_s=PACE_S)
    try:
        load.start()
        wait_for(lambda: load.acknowledged >= 12, timeout=30)
        restartable_postgres.stop()
        during_outage = httpx.post(
            f"{server.http_url}/v1/traces",
            content=encode_spans(probe).SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"},
            timeout=30,
        )
        assert during_outage.status_code == 503, during_outage.text
        assert int(during_outage.headers["Retry-After"]) >= 1
        assert load.acknowledged < requests_for(spans), "the outage must land mid-load"
        restartable_postgres.start()
        load.join(timeout=60)
        assert server.process.poll() is None, server.log()
    finally:
        server.stop()
    assert_stored_exactly_once(url, spans)
