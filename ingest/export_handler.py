"""The one seam both listeners call: request → normalize → group commit → response.

HTTP and gRPC decode differently but store identically: the handler normalizes once per
request (CPU work, before queueing, outside the writer) and waits for
the group commit. Rejected spans are reported through OTLP partial success
(``ExportTraceServiceResponse.partial_success``); the valid spans are stored.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tpmledger.ingest.error_taxonomy import IngestError, UndecodableBody
from tpmledger.ingest.group_commit import GroupCommitWriter
from tpmledger.ingest.internal_errors import InternalErrors, payload_run_ids
from tpmledger.ingest.metrics import IngestMetrics
from tpmledger.ingest.normalize_pool import NormalizePool
from tpmledger.ingest.request_encoding import EncodedRequest
from tpmledger.storage.codecs.attempt_encoding import UnstorableValue

log = logging.getLogger(__name__)

# At most this many distinct reasons are quoted back in partial_success.error_message.
_MAX_REASONS = 5

PayloadEncoder = Callable[[bytes | bytearray], Awaitable[EncodedRequest]]


class TraceExportHandler:
    """Normalize a request, store its LLM-call spans durably, build the OTLP response.

    Two entry points, one path: :meth:`export_payload` takes binary protobuf as it came
    off the wire (OTLP/HTTP protobuf and gRPC: no decode → re-encode round trip) and
    :meth:`export` takes a decoded message (OTLP/JSON). ``encode`` is where requests are
    normalized: :meth:`ingest.normalize_pool.NormalizePool.encode` (worker processes) in
    the service, inline by default. ``internal_errors`` counts and logs unexpected
    failures (the writer's, so both stages share one log of causes).
    """

    def __init__(
        self,
        writer: GroupCommitWriter,
        metrics: IngestMetrics,
        encode: PayloadEncoder | None = None,
        internal_errors: InternalErrors | None = None,
    ) -> None:
        self._writer = writer
        self._metrics = metrics
        self._encode = encode or NormalizePool(workers=0).encode
        self._internal = internal_errors or InternalErrors(metrics)

    def writer_stalled_s(self) -> float:
        """How long the group commit in progress has been running (0 when none is)."""
        return float(self._writer.stalled_s())

    def check_admission(self) -> None:
        """Refuse early (503) when the queue is full or the server is stopping."""
        self._writer.check_admission()

    async def export(self, request: ExportTraceServiceRequest) -> ExportTraceServiceResponse:
        """Store a decoded request's valid LLM-call spans; return after commit."""
        return await self.export_payload(request.SerializeToString())

    async def export_payload(self, payload: bytes) -> ExportTraceServiceResponse:
        """Like :meth:`export`, from serialized protobuf; 400 if it does not decode."""
        return await self.store(await self.encode(payload))

    async def encode(self, payload: bytes | bytearray) -> EncodedRequest:
        """First half of :meth:`export_payload`: normalize and encode (400 if undecodable,
        503 if normalizing failed unexpectedly: a bug must delay spans, not drop them).

        Callers that own the body can drop it after this and before :meth:`store`, so a
        request waiting for its commit holds its COPY block but no longer its body.
        """
        try:
            return await self._encode(payload)
        except IngestError:
            raise
        except (DecodeError, RecursionError, UnicodeDecodeError, UnstorableValue) as exc:
            raise UndecodableBody(f"invalid protobuf ExportTraceServiceRequest: {exc}") from exc
        except Exception as exc:
            raise self._internal.record("normalize", exc, lambda: payload_run_ids(payload)) from exc

    async def store(self, encoded: EncodedRequest) -> ExportTraceServiceResponse:
        """Second half of :meth:`export_payload`: commit the rows, build the response."""
        received = encoded.block.rows + encoded.block.tool_rows + encoded.ignored + encoded.rejected
        self._metrics.spans_received.inc(received)
        self._metrics.spans_ignored.inc(encoded.ignored)
        self._metrics.spans_rejected.inc(encoded.rejected)
        for source, count in encoded.content_dropped.items():
            self._metrics.content_dropped.labels(source).inc(count)
        await self._writer.submit(encoded.block)
        response = ExportTraceServiceResponse()
        refused = encoded.block.refused  # spans of archived runs (docs/operations.md)
        rejected = encoded.rejected + encoded.block.refused_spans
        if refused:
            self._metrics.spans_rejected.inc(encoded.block.refused_spans)
        if rejected:
            reasons = [reason for _, reason in refused.values()] + encoded.reject_reasons
            response.partial_success.rejected_spans = rejected
            response.partial_success.error_message = rejection_message(reasons)
        return response


def rejection_message(reasons: list[str]) -> str:
    """The distinct reasons, first ones first, short enough for a log line."""
    distinct = list(dict.fromkeys(reasons))
    message = "; ".join(distinct[:_MAX_REASONS])
    if len(distinct) > _MAX_REASONS:
        message += f"; and {len(distinct) - _MAX_REASONS} more kinds"
    return message
