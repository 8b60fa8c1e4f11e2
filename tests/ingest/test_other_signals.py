"""OTLP metrics and logs from the real OpenTelemetry SDK exporters, against a real ingest
process: accepted (no export failure), GenAI token usage stored and reconciled with the
spans, logs counted and dropped."""

from __future__ import annotations

import logging
import re
from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
    OTLPMetricExporter as GrpcMetricExporter,
)
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.fixtures.servers import RunningIngest, start_ingest
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.storage.server.database import in_one_snapshot
from tpmledger.storage.writers.genai_metric_store import metric_tokens


@pytest.fixture
def ingest(database_url: str) -> RunningIngest:
    server = start_ingest(database_url)
    yield server  # type: ignore[misc]
    server.stop()


def _resource(run_id: str) -> Resource:
    return Resource.create({"tpmledger.run.id": run_id, "tpmledger.shard.id": "0"})


def _export_token_usage(exporter: MetricExporter, run_id: str) -> None:
    """Two collections of a cumulative histogram: 100 input + 40 output, then 10 input."""
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(resource=_resource(run_id), metric_readers=[reader])
    usage = provider.get_meter("test").create_histogram("gen_ai.client.token.usage", unit="{token}")
    other = provider.get_meter("test").create_counter("http.client.requests")
    usage.record(100, {"gen_ai.token.type": "input", "gen_ai.request.model": "m"})
    usage.record(40, {"gen_ai.token.type": "output", "gen_ai.request.model": "m"})
    other.add(3)
    assert provider.force_flush()  # False when the export failed
    usage.record(10, {"gen_ai.token.type": "input", "gen_ai.request.model": "m"})
    assert provider.force_flush()
    assert provider.force_flush()  # the same cumulative values again: nothing added
    provider.shutdown()


def _run_after_a_span(
    ingest: RunningIngest, url: str, run_id: str, tokens: dict[str, int]
) -> dict[str, Any]:
    """Export one LLM-call span with these token counts; the run object once it is in the
    live table (what the analytics worker does, done here)."""
    provider = TracerProvider(resource=_resource(run_id))
    exporter = OTLPSpanExporter(endpoint=f"{ingest.http_url}/v1/traces")
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("test").start_as_current_span("chat m") as span:
        span.set_attribute("gen_ai.operation.name", "chat")
        for kind, count in tokens.items():
            span.set_attribute(f"gen_ai.usage.{kind}_tokens", count)
    provider.shutdown()
    LiveUpdater(url).update_once()
    run: dict[str, Any] = httpx.get(f"{ingest.http_url}/v1/runs/{run_id}", timeout=30).json()
    return run


@pytest.mark.slow
def test_token_usage_metrics_over_http_are_stored_and_reconciled(
    ingest: RunningIngest, database_url: str
) -> None:
    _export_token_usage(OTLPMetricExporter(endpoint=f"{ingest.http_url}/v1/metrics"), "m-run")
    assert in_one_snapshot(database_url, metric_tokens, "m-run") == 150
    # The run's spans counted 140 tokens: 10 are in spans that never arrived.
    run = _run_after_a_span(ingest, database_url, "m-run", {"input": 100, "output": 40})
    assert run["reconciliation"] == {"tokens_by_spans": 140, "tokens_by_metrics": 150, "gap": 10}


@pytest.mark.slow
def test_token_usage_metrics_over_grpc_are_stored(ingest: RunningIngest, database_url: str) -> None:
    exporter = GrpcMetricExporter(endpoint=ingest.grpc_endpoint, insecure=True)
    _export_token_usage(exporter, "g-run")
    assert in_one_snapshot(database_url, metric_tokens, "g-run") == 150


@pytest.mark.slow
def test_a_run_without_metrics_is_not_measured(ingest: RunningIngest, database_url: str) -> None:
    run = _run_after_a_span(ingest, database_url, "spans-only", {"input": 5})
    assert run["reconciliation"] == {"tokens_by_spans": 5, "tokens_by_metrics": None, "gap": None}


@pytest.mark.slow
def test_logs_are_accepted_counted_and_dropped(ingest: RunningIngest) -> None:
    provider = LoggerProvider(resource=_resource("l-run"))
    exporter = OTLPLogExporter(endpoint=f"{ingest.http_url}/v1/logs")
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = logging.getLogger("tpmledger-test-logs")
    logger.propagate = False
    handler = LoggingHandler(logger_provider=provider)
    logger.addHandler(handler)
    try:
        for i in range(3):
            logger.warning("record %d", i)
        assert provider.force_flush()
    finally:
        logger.removeHandler(handler)
        provider.shutdown()
    text = httpx.get(f"{ingest.http_url}/metrics", timeout=10).text
    found = re.search(
        r'^tpmledger_ingest_signal_items_total\{kept="dropped",signal="logs"\} (\S+)$',
        text,
        re.MULTILINE,
    )
    assert found is not None and float(found.group(1)) == 3.0, text[-2000:]
    # Bad bodies get the OTLP answers of traces.
    bad = httpx.post(
        f"{ingest.http_url}/v1/metrics",
        content=b"\xff\x00not protobuf",
        headers={"Content-Type": "application/x-protobuf"},
        timeout=10,
    )
    assert bad.status_code == 400


def _cumulative_export(run_id: str, start_ns: int, value: int) -> bytes:
    """One export of a cumulative token-usage counter: ``value`` since ``start_ns``."""
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
        ExportMetricsServiceRequest,
    )
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.metrics.v1 import metrics_pb2

    point = metrics_pb2.NumberDataPoint(
        start_time_unix_nano=start_ns, time_unix_nano=start_ns + 30_000_000_000, as_int=value
    )
    point.attributes.append(KeyValue(key="gen_ai.token.type", value=AnyValue(string_value="input")))
    metric = metrics_pb2.Metric(
        name="gen_ai.client.inference.usage.input_tokens",
        sum=metrics_pb2.Sum(
            data_points=[point],
            aggregation_temporality=metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE,
            is_monotonic=True,
        ),
    )
    request = ExportMetricsServiceRequest()
    resource = request.resource_metrics.add()
    resource.resource.attributes.append(
        KeyValue(key="tpmledger.run.id", value=AnyValue(string_value=run_id))
    )
    resource.scope_metrics.add().metrics.append(metric)
    return request.SerializeToString()


def test_a_late_resend_from_before_a_stream_restart_adds_nothing(
    ingest: RunningIngest, database_url: str
) -> None:
    """Issue 41: 100 (start s1), 10 (start s2), a delayed retry of the first, 20 (s2)
    stored 230 tokens; the stream's tokens are 100 + 20 = 120."""
    import time

    s1 = time.time_ns() - 600_000_000_000
    s2 = s1 + 120_000_000_000
    for start, value in ((s1, 100), (s2, 10), (s1, 100), (s2, 20)):
        answer = httpx.post(
            f"{ingest.http_url}/v1/metrics",
            content=_cumulative_export("restart-run", start, value),
            headers={"Content-Type": "application/x-protobuf"},
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
    assert in_one_snapshot(database_url, metric_tokens, "restart-run") == 120
