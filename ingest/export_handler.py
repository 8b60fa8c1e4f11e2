"""The one seam both listeners call: request → normalize → group commit → response.

HTTP and gRPC decode differently but store identically: :meth:`TraceExportHandler.export`
normalizes once per request (CPU work, before queueing, outside the writer) and waits for
the group commit. Rejected spans are reported through OTLP partial success
(``ExportTraceServiceResponse.partial_success``); the valid spans are stored.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ingest.group_commit import GroupCommitWriter
from ingest.metrics import IngestMetrics

# At most this many distinct reasons are quoted back in partial_success.error_message.
_MAX_REASONS = 5

Normalizer = Callable[[ExportTraceServiceRequest], Any]


def default_normalizer() -> Normalizer:
    """``ingest.normalize.normalize_request`` (imported late: it is a sibling stage)."""
    return importlib.import_module("ingest.normalize").normalize_request


def count_spans(request: ExportTraceServiceRequest) -> int:
    """How many spans a request carries."""
    return sum(
        len(scope_spans.spans)
        for resource_spans in request.resource_spans
        for scope_spans in resource_spans.scope_spans
    )


class TraceExportHandler:
    """Normalize a request, store its LLM-call spans durably, build the OTLP response."""

    def __init__(
        self,
        writer: GroupCommitWriter,
        metrics: IngestMetrics,
        normalize: Normalizer | None = None,
    ) -> None:
        self._writer = writer
        self._metrics = metrics
        self._normalize = normalize or default_normalizer()

    async def export(self, request: ExportTraceServiceRequest) -> ExportTraceServiceResponse:
        """Store the request's valid LLM-call spans; return after they are committed."""
        self._metrics.spans_received.inc(count_spans(request))
        batch = self._normalize(request)
        self._metrics.spans_ignored.inc(batch.ignored)
        self._metrics.spans_rejected.inc(batch.rejected)
        await self._writer.submit(batch.rows)
        response = ExportTraceServiceResponse()
        if batch.rejected:
            response.partial_success.rejected_spans = batch.rejected
            response.partial_success.error_message = rejection_message(batch.reject_reasons)
        return response


def rejection_message(reasons: list[str]) -> str:
    """The distinct reasons, first ones first, short enough for a log line."""
    distinct = list(dict.fromkeys(reasons))
    message = "; ".join(distinct[:_MAX_REASONS])
    if len(distinct) > _MAX_REASONS:
        message += f"; and {len(distinct) - _MAX_REASONS} more kinds"
    return message
