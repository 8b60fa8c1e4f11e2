"""The export seam alone, with a recording writer: normalize → submit → OTLP response."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from ingest.error_taxonomy import UndecodableBody
from ingest.export_handler import TraceExportHandler, rejection_message
from ingest.metrics import IngestMetrics
from ingest.normalize import NormalizedBatch
from tests.ingest.otlp_builders import export_request, llm_span


class RecordingWriter:
    """Stands in for GroupCommitWriter at the seam: records what would be committed."""

    def __init__(self) -> None:
        self.submitted: list[Sequence[Any]] = []

    def check_admission(self) -> None:
        pass

    async def submit(self, rows: Sequence[Any]) -> None:
        self.submitted.append(rows)


def handler(writer: RecordingWriter, **normalizers: Any) -> TraceExportHandler:
    return TraceExportHandler(writer, IngestMetrics(), **normalizers)  # type: ignore[arg-type]


def test_valid_and_invalid_spans_split_into_rows_and_partial_success() -> None:
    writer = RecordingWriter()
    bad = llm_span()
    bad.end_time_unix_nano = bad.start_time_unix_nano - 1
    request = export_request([llm_span(), bad, llm_span()])
    response = asyncio.run(handler(writer).export_payload(request.SerializeToString()))
    assert [len(rows) for rows in writer.submitted] == [2]
    assert response.partial_success.rejected_spans == 1
    assert response.partial_success.error_message
    same = asyncio.run(handler(RecordingWriter()).export(request))
    assert same == response


def test_undecodable_protobuf_is_a_permanent_error() -> None:
    with pytest.raises(UndecodableBody):
        asyncio.run(handler(RecordingWriter()).export_payload(b"\xff\xff\xff"))


def test_an_unexpected_normalizer_failure_is_400_not_500() -> None:
    def broken(_: Any) -> NormalizedBatch:
        raise KeyError("bug")

    writer = RecordingWriter()
    h = handler(writer, normalize=broken, normalize_payload=broken)
    with pytest.raises(UndecodableBody):
        asyncio.run(h.export_payload(b""))
    with pytest.raises(UndecodableBody):
        asyncio.run(h.export(export_request([])))
    assert writer.submitted == []


def test_rejection_message_is_short_and_distinct() -> None:
    assert rejection_message(["a", "b", "a"]) == "a; b"
    long = rejection_message([str(i) for i in range(9)])
    assert long == "0; 1; 2; 3; 4; and 4 more kinds"
