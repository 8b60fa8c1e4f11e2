"""The export seam alone, with a recording writer: normalize → submit → OTLP response."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tests.ingest.otlp_builders import export_request, llm_span
from tpmledger.ingest.error_taxonomy import InternalFailure, UndecodableBody
from tpmledger.ingest.export_handler import TraceExportHandler, rejection_message
from tpmledger.ingest.metrics import IngestMetrics
from tpmledger.ingest.request_encoding import EncodedRequest
from tpmledger.storage.codecs.attempt_encoding import AttemptBlock


class RecordingWriter:
    """Stands in for GroupCommitWriter at the seam: records what would be committed."""

    def __init__(self) -> None:
        self.submitted: list[AttemptBlock] = []

    def check_admission(self) -> None:
        pass

    async def submit(self, block: AttemptBlock) -> None:
        self.submitted.append(block)


def handler(writer: RecordingWriter, **encoder: Any) -> TraceExportHandler:
    return TraceExportHandler(writer, IngestMetrics(), **encoder)  # type: ignore[arg-type]


def test_valid_and_invalid_spans_split_into_rows_and_partial_success() -> None:
    writer = RecordingWriter()
    bad = llm_span()
    bad.end_time_unix_nano = bad.start_time_unix_nano - 1
    request = export_request([llm_span(), bad, llm_span()])
    response = asyncio.run(handler(writer).export_payload(request.SerializeToString()))
    assert [block.rows for block in writer.submitted] == [2]
    assert response.partial_success.rejected_spans == 1
    assert response.partial_success.error_message
    same = asyncio.run(handler(RecordingWriter()).export(request))
    assert same == response


def test_undecodable_protobuf_is_a_permanent_error() -> None:
    with pytest.raises(UndecodableBody):
        asyncio.run(handler(RecordingWriter()).export_payload(b"\xff\xff\xff"))


def test_an_unexpected_normalizer_failure_is_retryable_counted_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A bug is not bad input: 503 + Retry-After (the exporter keeps the spans and retries),
    counted apart from rejected spans, logged once per cause with the request's run ids."""

    async def broken(_: bytes) -> EncodedRequest:
        raise KeyError("bug")

    writer = RecordingWriter()
    metrics = IngestMetrics()
    h = TraceExportHandler(writer, metrics, encode=broken)  # type: ignore[arg-type]
    request = export_request([llm_span()], run_id="run-bug")
    with caplog.at_level(logging.ERROR, logger="tpmledger.ingest.internal_errors"):
        for _ in range(3):
            with pytest.raises(InternalFailure) as raised:
                asyncio.run(h.export(request))
    assert raised.value.http_status == 503 and raised.value.retryable
    assert raised.value.http_headers()["Retry-After"] == "2"
    assert raised.value.grpc_code.name == "UNAVAILABLE"
    assert raised.value.to_status().details, "RetryInfo travels with the gRPC status"
    assert writer.submitted == []
    exposition = metrics.render().decode()
    assert 'tpmledger_ingest_internal_errors_total{stage="normalize"} 3.0' in exposition
    assert "tpmledger_ingest_spans_rejected_total 0.0" in exposition
    logged = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(logged) == 1, "once per cause, not once per retry"
    assert "run-bug" in logged[0].getMessage() and logged[0].exc_info


def test_undecodable_bytes_stay_a_permanent_400_not_an_internal_error() -> None:
    metrics = IngestMetrics()
    h = TraceExportHandler(RecordingWriter(), metrics)  # type: ignore[arg-type]
    with pytest.raises(UndecodableBody):
        asyncio.run(h.export_payload(b"\xff\xff\xff"))
    assert 'internal_errors_total{stage="normalize"} 0.0' in metrics.render().decode()


def test_rejection_message_is_short_and_distinct() -> None:
    assert rejection_message(["a", "b", "a"]) == "a; b"
    long = rejection_message([str(i) for i in range(9)])
    assert long == "0; 1; 2; 3; 4; and 4 more kinds"
