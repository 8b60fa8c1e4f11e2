"""The export seam alone, with a recording writer: normalize → submit → OTLP response."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.ingest.otlp_builders import export_request, llm_span
from tpmledger.ingest.error_taxonomy import UndecodableBody
from tpmledger.ingest.export_handler import TraceExportHandler, rejection_message
from tpmledger.ingest.metrics import IngestMetrics
from tpmledger.ingest.request_encoding import EncodedRequest
from tpmledger.storage.attempt_encoding import AttemptBlock


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


def test_an_unexpected_normalizer_failure_is_400_not_500() -> None:
    async def broken(_: bytes) -> EncodedRequest:
        raise KeyError("bug")

    writer = RecordingWriter()
    h = handler(writer, encode=broken)
    with pytest.raises(UndecodableBody):
        asyncio.run(h.export_payload(b""))
    with pytest.raises(UndecodableBody):
        asyncio.run(h.export(export_request([])))
    assert writer.submitted == []


def test_rejection_message_is_short_and_distinct() -> None:
    assert rejection_message(["a", "b", "a"]) == "a; b"
    long = rejection_message([str(i) for i in range(9)])
    assert long == "0; 1; 2; 3; 4; and 4 more kinds"
