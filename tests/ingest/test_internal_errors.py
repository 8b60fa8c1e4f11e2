"""An unexpected failure in normalization delays spans, never loses them (issue 40).

A real ``serve ingest`` process whose normalizer fails while a file exists
(tests/fixtures/faulty_ingest.py), real OpenTelemetry SDK exporters (OTLP/HTTP and
OTLP/gRPC) with nothing but their own retry: while the fault lasts every export is
answered 503 / ``UNAVAILABLE`` with a retry hint and counted on ``/metrics`` as an internal
error (not as rejected spans); once it stops, the exporters' retries store every span once.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from tests.fixtures.fault_servers import batches, llm_spans, span_ids, stored_ids
from tests.fixtures.faulty_ingest import FAULT_FILE_ENV
from tests.fixtures.servers import start_ingest, wait_for

pytestmark = pytest.mark.slow


def internal_errors(http_url: str, stage: str) -> float:
    text = httpx.get(f"{http_url}/metrics", timeout=5).text
    found = re.search(
        rf'^tpmledger_ingest_internal_errors_total{{stage="{stage}"}} (\S+)$', text, re.M
    )
    assert found, text
    return float(found.group(1))


def test_a_normalizer_bug_is_retried_by_the_exporters_and_loses_nothing(
    database_url: str, tmp_path: Path
) -> None:
    fault = tmp_path / "normalizer-broken"
    fault.touch()
    server = start_ingest(
        database_url,
        env={FAULT_FILE_ENV: str(fault), "TPMLEDGER_RETRY_AFTER_S": "1"},
        module="tests.fixtures.faulty_ingest",
    )
    spans = llm_spans(200, run_id="run-normalizer-bug")
    exporters: list[SpanExporter] = [
        OTLPSpanExporter(endpoint=f"{server.http_url}/v1/traces", timeout=60),
        OTLPSpanExporter(endpoint=f"{server.http_url}/v1/traces", timeout=60),
        GrpcSpanExporter(endpoint=server.grpc_endpoint, insecure=True, timeout=60),
        GrpcSpanExporter(endpoint=server.grpc_endpoint, insecure=True, timeout=60),
    ]
    results: list[SpanExportResult] = []

    def export(exporter: SpanExporter, batch: Sequence[ReadableSpan]) -> None:
        results.append(exporter.export(batch))  # the SDK's own retry, nothing else

    threads = [
        threading.Thread(target=export, args=pair, daemon=True)
        for pair in zip(exporters, batches(spans, 50), strict=True)
    ]
    try:
        # While the fault lasts: retryable, with a hint, and not counted as bad input.
        answer = httpx.post(
            f"{server.http_url}/v1/traces",
            content=encode_spans(spans[:1]).SerializeToString(),
            headers={"Content-Type": "application/x-protobuf"},
            timeout=10,
        )
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"] == "1"
        for thread in threads:
            thread.start()
        # Every exporter has been refused at least once before the fault stops.
        wait_for(lambda: internal_errors(server.http_url, "normalize") >= 5, timeout=30)
        fault.unlink()
        for thread in threads:
            thread.join(60)
        assert results == [SpanExportResult.SUCCESS] * 4
        assert internal_errors(server.http_url, "store") == 0
        exposition = httpx.get(f"{server.http_url}/metrics", timeout=5).text
        assert "tpmledger_ingest_spans_rejected_total 0.0" in exposition
    finally:
        for exporter in exporters:
            exporter.shutdown()  # a gRPC channel left to interpreter teardown can crash it
        server.stop()
    count, ids = stored_ids(database_url)
    assert count == len(spans) and ids == span_ids(spans)
    log = server.log_path.read_text(errors="replace")
    logged = log.count("unexpected failure while normalizing")
    assert logged == 1, f"logged once per cause, not per retry:\n{log}"
    assert "run-normalizer-bug" in log and "injected normalizer failure" in log
