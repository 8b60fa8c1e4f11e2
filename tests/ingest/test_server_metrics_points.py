"""vLLM / SGLang points of an OTLP export, read alone (docs/metrics.md#serving-side-metrics)."""

from __future__ import annotations

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

from tpmledger.ingest.server_metrics_otlp import server_readings

T_NS = 1_790_000_040 * 1_000_000_000


def _attrs(**values: str) -> list[KeyValue]:
    return [KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in values.items()]


def _request(*metrics: metrics_pb2.Metric) -> ExportMetricsServiceRequest:
    resource = metrics_pb2.ResourceMetrics()
    resource.resource.attributes.extend(
        _attrs(**{"server.address": "gpu-9", "server.port": "30000", "tpmledger.run.id": "r1"})
    )
    resource.scope_metrics.add().metrics.extend(metrics)
    return ExportMetricsServiceRequest(resource_metrics=[resource])


def test_delta_sums_run_ids_and_bad_points() -> None:
    retracted = metrics_pb2.Metric(name="sglang:num_retracted_requests")
    retracted.sum.aggregation_temporality = metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
    retracted.sum.is_monotonic = True
    point = retracted.sum.data_points.add(time_unix_nano=T_NS, as_int=3)
    point.attributes.extend(_attrs(model_name="qwen"))
    usage = metrics_pb2.Metric(name="sglang:token_usage")
    good = usage.gauge.data_points.add(time_unix_nano=T_NS, as_double=0.93)
    good.attributes.extend(_attrs(model_name="qwen"))
    usage.gauge.data_points.add(time_unix_nano=0, as_double=0.5)  # no time: rejected
    usage.gauge.data_points.add(time_unix_nano=T_NS, as_double=-1.0)  # negative: rejected
    other = metrics_pb2.Metric(name="http.server.duration")
    other.gauge.data_points.add(time_unix_nano=T_NS, as_double=1.0)

    readings = server_readings(_request(retracted, usage, other))
    assert (readings.points, readings.rejected) == (4, 2)
    [counter] = readings.counters
    assert counter.delta and counter.value == 3 and counter.field == "preemptions"
    assert counter.key.instance == "gpu-9:30000" and counter.key.run_id == "r1"
    [gauge] = readings.gauges
    assert (gauge.key.engine, gauge.key.model, gauge.field, gauge.value) == (
        "sglang",
        "qwen",
        "kv_cache",
        0.93,
    )


def test_delta_points_add_their_value_each_time(database_url: str) -> None:
    import psycopg

    from tpmledger.storage.server.database import libpq_url
    from tpmledger.storage.writers.server_metric_store import add_server_readings

    retracted = metrics_pb2.Metric(name="sglang:num_retracted_requests_total")
    retracted.sum.aggregation_temporality = metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
    retracted.sum.data_points.add(time_unix_nano=T_NS, as_int=3).attributes.extend(
        _attrs(model_name="qwen")
    )
    readings = server_readings(_request(retracted))
    for _ in range(2):  # deltas have no identity to recognise a re-send: each one adds
        add_server_readings(database_url, readings.gauges, readings.counters)
    with psycopg.connect(libpq_url(database_url)) as conn:
        row = conn.execute("SELECT run_id, preemptions FROM server_metric_minutes").fetchone()
    assert row == ("r1", 6.0)
