"""vLLM / SGLang series sent as OTLP metrics — what an OpenTelemetry Collector's Prometheus
receiver forwards — through the real OpenTelemetry SDK metric exporters to a running ingest
(docs/metrics.md#serving-side-metrics).

The SDK's instruments refuse names with a colon, as the Collector never needs them to: the
batches are built as the Collector hands them to its exporter and sent by the SDK's own.
"""

from __future__ import annotations

from typing import Any

import httpx
import psycopg
import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
    OTLPMetricExporter as GrpcMetricExporter,
)
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from tests.fixtures.servers import RunningIngest
from tpmledger.storage.server.database import libpq_url

T0_NS = 1_790_000_040 * 1_000_000_000  # a whole minute
START_NS = T0_NS - 3_600_000_000_000
SECOND_NS = 1_000_000_000


def _gauge(name: str, value: float, at: int, labels: dict[str, Any]) -> Metric:
    point = NumberDataPoint(labels, 0, at, value)
    return Metric(name, "", "", Gauge([point]))


def _counter(name: str, value: float, at: int, labels: dict[str, Any], start: int) -> Metric:
    point = NumberDataPoint(labels, start, at, value)
    return Metric(name, "", "", Sum([point], AggregationTemporality.CUMULATIVE, True))


def _histogram(
    name: str, total: float, count: int, at: int, labels: dict[str, Any], start: int
) -> Metric:
    point = HistogramDataPoint(labels, start, at, count, total, [count], [], None, None)
    return Metric(name, "", "s", Histogram([point], AggregationTemporality.CUMULATIVE))


def _collector_batch(
    at: int, preemptions: float, waiting: float, start: int = START_NS
) -> MetricsData:
    """One scrape of a vLLM server, as the Prometheus receiver turns it into OTLP."""
    labels = {"model_name": "llama-otlp", "engine": "0"}
    resource = Resource.create(
        {
            "service.name": "vllm",
            "service.instance.id": "gpu-7:8000",
            "server.address": "gpu-7",
            "server.port": "8000",
        }
    )
    metrics = [
        _gauge("vllm:num_requests_running", 16, at, labels),
        _gauge("vllm:num_requests_waiting", waiting, at, labels),
        _gauge("vllm:kv_cache_usage_perc", 0.98, at, labels),
        _counter("vllm:num_preemptions_total", preemptions, at, labels, start),
        _counter("vllm:prompt_tokens", 1000 + preemptions * 100, at, labels, start),
        _histogram(
            "vllm:request_queue_time_seconds",
            2.0 * preemptions,
            int(preemptions),
            at,
            labels,
            start,
        ),
        _gauge("process_resident_memory_bytes", 1e9, at, {}),  # not read: dropped
        _gauge("vllm:kv_cache_usage_perc", float("nan"), at, {"model_name": "bad"}),  # rejected
    ]
    scope = ScopeMetrics(InstrumentationScope("otelcol/prometheusreceiver"), metrics, "")
    return MetricsData([ResourceMetrics(resource, [scope], "")])


def _rows(database_url: str) -> list[dict[str, Any]]:
    with psycopg.connect(libpq_url(database_url)) as conn:
        cur = conn.execute("SELECT * FROM server_metric_minutes ORDER BY minute_utc")
        names = [d.name for d in cur.description or []]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_collector_batches_become_server_minutes(
    running_ingest: RunningIngest, transport: str
) -> None:
    if transport == "http":
        exporter: Any = OTLPMetricExporter(endpoint=f"{running_ingest.http_url}/v1/metrics")
    else:
        exporter = GrpcMetricExporter(endpoint=running_ingest.grpc_endpoint, insecure=True)
    batches = [
        _collector_batch(T0_NS + 5 * SECOND_NS, preemptions=10, waiting=4),
        _collector_batch(T0_NS + 20 * SECOND_NS, preemptions=14, waiting=8),
        _collector_batch(T0_NS + 20 * SECOND_NS, preemptions=14, waiting=8),  # re-sent
        # The server restarted: a new start time, the count from zero again.
        _collector_batch(T0_NS + 35 * SECOND_NS, preemptions=3, waiting=6, start=T0_NS),
    ]
    for batch in batches:
        assert exporter.export(batch) == MetricExportResult.SUCCESS
    exporter.shutdown()

    [row] = _rows(running_ingest.database_url)
    assert (row["instance"], row["engine"], row["model"], row["run_id"]) == (
        "gpu-7:8000",
        "vllm",
        "llama-otlp",
        "",
    )
    assert (row["running_sum"], row["running_count"]) == (64, 4)
    assert (row["waiting_max"], row["kv_cache_max"]) == (8, 0.98)
    assert row["preemptions"] == 4 + 3  # 10 → 14, a repeat, then the restart's 3
    assert row["prompt_tokens"] == 400 + 1300
    assert row["queue_time_s"] == 8 + 6 and row["queue_count"] == 4 + 3
    text = httpx.get(f"{running_ingest.http_url}/metrics", timeout=30).text
    # Per batch: 6 server points stored, 1 other dropped, 1 NaN rejected.
    assert 'tpmledger_ingest_signal_items_total{kept="stored",signal="metrics"} 24.0' in text
    assert 'tpmledger_ingest_signal_items_total{kept="dropped",signal="metrics"} 4.0' in text
    assert 'tpmledger_ingest_signal_items_total{kept="rejected",signal="metrics"} 4.0' in text
