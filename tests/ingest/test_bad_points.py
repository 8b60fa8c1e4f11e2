"""One bad point or span loses nothing else (docs/ingest.md#other-signals).

Round-2 reproductions: a NUL run id or two 1.7e308 points answered HTTP 500 / gRPC
UNKNOWN (with SQL in the details) and lost every point of the export; one NaN point broke
the run's page for good; one span with a non-UTF-8 name lost a whole request.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AGGREGATION_TEMPORALITY_DELTA,
    Metric,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource as SdkResource

from tests.fixtures.servers import RunningIngest, start_ingest
from tests.ingest.otlp_builders import export_request, llm_span
from tests.otlp_values import key_value
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.storage.server.database import in_one_snapshot, raw_transaction
from tpmledger.storage.writers.genai_metric_store import metric_tokens

NOW_NS = 1_790_000_000_000_000_000


@pytest.fixture(scope="module")
def ingest(pg_server_url: str, template_database: str) -> Iterator[RunningIngest]:
    from tests.conftest import create_test_database, drop_test_database

    url = create_test_database(pg_server_url, template_database)
    server = start_ingest(url)
    try:
        yield server
    finally:
        server.stop()
        drop_test_database(pg_server_url, url)


def _points(run_id: str, *values: float) -> ResourceMetrics:
    points = [
        NumberDataPoint(
            as_double=value,
            time_unix_nano=NOW_NS,
            start_time_unix_nano=NOW_NS - 1,
            attributes=[key_value("gen_ai.token.type", "input")],
        )
        for value in values
    ]
    metric = Metric(
        name="gen_ai.client.inference.usage.input_tokens",
        sum=Sum(data_points=points, aggregation_temporality=AGGREGATION_TEMPORALITY_DELTA),
    )
    return ResourceMetrics(
        resource=Resource(attributes=[key_value("tpmledger.run.id", run_id)]),
        scope_metrics=[ScopeMetrics(metrics=[metric])],
    )


def _bad_export(good_run: str) -> ExportMetricsServiceRequest:
    nan, inf = float("nan"), float("inf")
    return ExportMetricsServiceRequest(
        resource_metrics=[
            _points("nul\x00run", 5),  # rejected: NUL in the run id
            _points(good_run, 100, nan, inf, -inf, -3, 1.7e308, 1.7e308, 20),
        ]
    )


def _assert_partial(partial: Any) -> None:
    assert partial.rejected_data_points == 7
    for words in ("NUL", "NaN or infinite", "negative", "larger than"):
        assert words in partial.error_message
    assert "INSERT" not in partial.error_message and "SELECT" not in partial.error_message


@pytest.mark.slow
def test_bad_metric_points_are_rejected_alone_over_http(ingest: RunningIngest) -> None:
    answer = httpx.post(
        f"{ingest.http_url}/v1/metrics",
        content=_bad_export("m-http").SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    _assert_partial(ExportMetricsServiceResponse.FromString(answer.content).partial_success)
    assert in_one_snapshot(ingest.database_url, metric_tokens, "m-http") == 120


@pytest.mark.slow
def test_bad_metric_points_are_rejected_alone_over_grpc(ingest: RunningIngest) -> None:
    with grpc.insecure_channel(ingest.grpc_endpoint) as channel:
        export = channel.unary_unary(
            "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
            request_serializer=ExportMetricsServiceRequest.SerializeToString,
            response_deserializer=ExportMetricsServiceResponse.FromString,
        )
        response = export(_bad_export("m-grpc"), timeout=30)
    _assert_partial(response.partial_success)
    assert in_one_snapshot(ingest.database_url, metric_tokens, "m-grpc") == 120


def test_an_sdk_exporter_sending_nan_loses_only_that_point(ingest: RunningIngest) -> None:
    exporter = OTLPMetricExporter(endpoint=f"{ingest.http_url}/v1/metrics")
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    resource = SdkResource.create({"tpmledger.run.id": "m-sdk", "tpmledger.shard.id": "0"})
    provider = MeterProvider(resource=resource, metric_readers=[reader])
    meter = provider.get_meter("test")
    meter.create_counter("gen_ai.client.inference.usage.input_tokens").add(
        float("nan"), {"gen_ai.token.type": "input", "gen_ai.request.model": "bad"}
    )
    meter.create_counter("gen_ai.client.inference.usage.output_tokens").add(
        7, {"gen_ai.token.type": "output"}
    )
    assert provider.force_flush()  # the export succeeded (partial success, not a failure)
    provider.shutdown()
    assert in_one_snapshot(ingest.database_url, metric_tokens, "m-sdk") == 7


@pytest.mark.slow
def test_stored_non_finite_tokens_never_break_a_run_page(ingest: RunningIngest) -> None:
    url = ingest.database_url
    answer = httpx.post(
        f"{ingest.http_url}/v1/traces",
        content=export_request([llm_span()], run_id="m-nan").SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
    )
    assert answer.status_code == 200
    with raw_transaction(url) as conn:  # as an older version stored them
        for minute, tokens in (("2026-01-01", "NaN"), ("2026-01-02", "Infinity")):
            conn.execute(
                "INSERT INTO genai_metric_tokens VALUES ('m-nan', '0', %s, 'input', %s)",
                (minute, tokens),
            )
    LiveUpdater(url).update_once()
    run = httpx.get(f"{ingest.http_url}/v1/runs/m-nan", timeout=30)
    assert run.status_code == 200
    assert run.json()["reconciliation"]["tokens_by_metrics"] is None


def test_one_span_with_a_non_utf8_name_is_rejected_alone(ingest: RunningIngest) -> None:
    request = export_request([llm_span() for _ in range(5)], run_id="names-ok")
    bad = export_request([llm_span()], run_id="names-bad")
    bad.resource_spans[0].scope_spans[0].spans[0].name = "PLACEHOLDER"
    request.resource_spans.extend(bad.resource_spans)
    body = request.SerializeToString().replace(b"PLACEHOLDER", b"PLACE\xff\xfeLDER")
    for send in ("http", "grpc"):
        if send == "http":
            answer = httpx.post(
                f"{ingest.http_url}/v1/traces",
                content=body,
                headers={"Content-Type": "application/x-protobuf"},
            )
            assert answer.status_code == 200, answer.text
            partial = ExportTraceServiceResponse.FromString(answer.content).partial_success
        else:
            with grpc.insecure_channel(ingest.grpc_endpoint) as channel:
                export = channel.unary_unary(
                    "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                    request_serializer=None,
                    response_deserializer=ExportTraceServiceResponse.FromString,
                )
                partial = export(body, timeout=30).partial_success
        assert partial.rejected_spans == 1
        assert "UTF-8" in partial.error_message
    with raw_transaction(ingest.database_url) as conn:
        stored = dict(conn.execute("SELECT run_id, count(*) FROM attempts GROUP BY run_id"))
    assert stored.get("names-ok") == 5 and "names-bad" not in stored
