"""OpenTelemetry SDK set-up for one shard: resource identity, OTLP export, export counting.

The exporter is wrapped so the shard knows how many spans the SDK exported *successfully*
(the exporter returned SUCCESS, i.e. the receiver answered 200 — which for tpmledger means
committed, docs/ingest.md). Tests compare that figure with the rows stored for the run.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from tpmledger.simulator.config import ShardConfig

# Keep every span of a busy shard rather than dropping (the SDK drops when its queue is full).
MAX_QUEUE_SIZE = 200_000


class CountingSpanExporter(SpanExporter):
    """Delegates to a real exporter and counts spans by export result."""

    def __init__(self, inner: SpanExporter) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self.exported = 0
        self.failed = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self._inner.export(spans)
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.exported += len(spans)
            else:
                self.failed += len(spans)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._inner.force_flush(timeout_millis)


def shard_resource(config: ShardConfig) -> Resource:
    """Run and shard identity as resource attributes (docs/conventions.md)."""
    attributes: dict[str, str | int] = {
        "service.name": config.service_name,
        "tpmledger.run.id": config.run_id,
        "tpmledger.shard.id": str(config.shard_id),
        "tpmledger.shard.count": config.shard_count,
        "tpmledger.concurrency.cap": config.concurrency,
    }
    if config.sweep_id:
        attributes["tpmledger.sweep.id"] = config.sweep_id
    return Resource.create(attributes)


def otlp_exporter(endpoint: str, protocol: str) -> SpanExporter:
    """A real OTLP exporter: http/protobuf to ``endpoint/v1/traces``, or gRPC to ``endpoint``."""
    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcExporter,
        )

        return GrpcExporter(endpoint=endpoint, insecure=not endpoint.startswith("https://"))
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    url = endpoint.rstrip("/")
    if not url.endswith("/v1/traces"):
        url += "/v1/traces"
    return OTLPSpanExporter(endpoint=url)


def build_tracer_provider(
    config: ShardConfig, exporter: SpanExporter | None = None
) -> tuple[TracerProvider, CountingSpanExporter]:
    """A provider exporting through a counted batch processor (``exporter`` overrides OTLP)."""
    counting = CountingSpanExporter(
        exporter or otlp_exporter(config.otlp_endpoint, config.otlp_protocol)
    )
    provider = TracerProvider(resource=shard_resource(config))
    provider.add_span_processor(
        BatchSpanProcessor(
            counting,
            max_queue_size=MAX_QUEUE_SIZE,
            max_export_batch_size=512,
            schedule_delay_millis=500,
        )
    )
    return provider, counting
