"""Export counting at the exporter seam, resource identity, OTLP endpoint handling."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from tpmledger.simulator.config import ShardConfig
from tpmledger.simulator.telemetry import build_tracer_provider, otlp_exporter, shard_resource


class FlakyExporter(SpanExporter):
    """Fails every other batch."""

    def __init__(self) -> None:
        self.calls = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.calls += 1
        return SpanExportResult.FAILURE if self.calls % 2 == 0 else SpanExportResult.SUCCESS


def _config(**overrides: object) -> ShardConfig:
    values = {
        "run_id": "r",
        "shard_id": 5,
        "shard_count": 8,
        "duration_s": 1,
        "llm_url": "http://x",
        "otlp_endpoint": "http://127.0.0.1:4318",
        **overrides,
    }
    return ShardConfig.model_validate(values)


def test_only_successful_exports_count_as_exported() -> None:
    provider, counting = build_tracer_provider(_config(), exporter=FlakyExporter())
    tracer = provider.get_tracer("t")
    for batch in (3, 2, 4):
        for _ in range(batch):
            tracer.start_span("chat").end()
        provider.force_flush()
    provider.shutdown()
    assert (counting.exported, counting.failed) == (7, 2)


def test_resource_names_run_shard_cap_and_sweep_only_when_given() -> None:
    plain = shard_resource(_config()).attributes
    assert plain["tpmledger.shard.id"] == "5" and plain["tpmledger.shard.count"] == 8
    assert plain["tpmledger.concurrency.cap"] == 16
    assert "tpmledger.sweep.id" not in plain
    assert shard_resource(_config(sweep_id="s1")).attributes["tpmledger.sweep.id"] == "s1"


def test_http_exporter_posts_to_v1_traces_once() -> None:
    for endpoint in ("http://h:4318", "http://h:4318/", "http://h:4318/v1/traces"):
        exporter = otlp_exporter(endpoint, "http/protobuf")
        assert isinstance(exporter, OTLPSpanExporter)
        assert exporter._endpoint == "http://h:4318/v1/traces"
