"""The one seam both listeners call: request → normalize → group commit → response.

HTTP and gRPC decode differently but store identically: the handler normalizes once per
request (CPU work, before queueing, outside the writer) and waits for
the group commit. Rejected spans are reported through OTLP partial success
(``ExportTraceServiceResponse.partial_success``); the valid spans are stored.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ingest.error_taxonomy import UndecodableBody
from ingest.group_commit import GroupCommitWriter
from ingest.metrics import IngestMetrics

log = logging.getLogger(__name__)

# At most this many distinct reasons are quoted back in partial_success.error_message.
_MAX_REASONS = 5

RequestNormalizer = Callable[[ExportTraceServiceRequest], Any]
PayloadNormalizer = Callable[[bytes], Any]


def _normalize_module() -> Any:
    # Imported late: normalize is a sibling stage and the handler only needs its interface.
    return importlib.import_module("ingest.normalize")


class TraceExportHandler:
    """Normalize a request, store its LLM-call spans durably, build the OTLP response.

    Two entry points, one path: :meth:`export_payload` takes binary protobuf as it came
    off the wire (OTLP/HTTP protobuf and gRPC: no decode → re-encode round trip) and
    :meth:`export` takes a decoded message (OTLP/JSON).
    """

    def __init__(
        self,
        writer: GroupCommitWriter,
        metrics: IngestMetrics,
        normalize: RequestNormalizer | None = None,
        normalize_payload: PayloadNormalizer | None = None,
    ) -> None:
        self._writer = writer
        self._metrics = metrics
        self._normalize = normalize or _normalize_module().normalize_request
        self._normalize_payload = normalize_payload or _normalize_module().normalize_payload

    def check_admission(self) -> None:
        """Refuse early (503) when the queue is full or the server is stopping."""
        self._writer.check_admission()

    async def export(self, request: ExportTraceServiceRequest) -> ExportTraceServiceResponse:
        """Store a decoded request's valid LLM-call spans; return after commit."""
        try:
            batch = self._normalize(request)
        except Exception as exc:
            raise _unreadable(exc) from exc
        return await self._store(batch)

    async def export_payload(self, payload: bytes) -> ExportTraceServiceResponse:
        """Like :meth:`export`, from serialized protobuf; 400 if it does not decode."""
        try:
            batch = self._normalize_payload(payload)
        except (DecodeError, RecursionError, ValueError) as exc:
            raise UndecodableBody(f"invalid protobuf ExportTraceServiceRequest: {exc}") from exc
        except Exception as exc:
            raise _unreadable(exc) from exc
        return await self._store(batch)

    async def _store(self, batch: Any) -> ExportTraceServiceResponse:
        received = len(batch.rows) + batch.ignored + batch.rejected
        self._metrics.spans_received.inc(received)
        self._metrics.spans_ignored.inc(batch.ignored)
        self._metrics.spans_rejected.inc(batch.rejected)
        await self._writer.submit(batch.rows)
        response = ExportTraceServiceResponse()
        if batch.rejected:
            response.partial_success.rejected_spans = batch.rejected
            response.partial_success.error_message = rejection_message(batch.reject_reasons)
        return response


def _unreadable(exc: Exception) -> UndecodableBody:
    # Bad input must never become a 500 that the sender re-sends forever (SPEC §3): an
    # unexpected normalizer failure is logged loudly and answered as a permanent 400.
    log.exception("normalizing a request failed; answered 400")
    return UndecodableBody(f"could not read the spans of this request ({type(exc).__name__})")


def rejection_message(reasons: list[str]) -> str:
    """The distinct reasons, first ones first, short enough for a log line."""
    distinct = list(dict.fromkeys(reasons))
    message = "; ".join(distinct[:_MAX_REASONS])
    if len(distinct) > _MAX_REASONS:
        message += f"; and {len(distinct) - _MAX_REASONS} more kinds"
    return message
