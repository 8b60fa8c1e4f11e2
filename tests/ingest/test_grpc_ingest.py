"""OTLP/gRPC ingest end to end: the real gRPC exporter and raw stubs against the real server."""

from __future__ import annotations

import time

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.fixtures.servers import RunningIngest, SeparatePostgres, start_ingest
from tests.ingest.otlp_builders import export_request, llm_span
from tests.ingest.stored_rows import run_attempts, stored_attempts, stored_count
from tests.ingest.test_http_ingest import RUN, recorded_llm_spans


def export(endpoint: str, request: ExportTraceServiceRequest) -> ExportTraceServiceResponse:
    with grpc.insecure_channel(endpoint) as channel:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)
        response: ExportTraceServiceResponse = stub.Export(request, timeout=30)
        return response


@pytest.mark.slow
@pytest.mark.parametrize("compression", [grpc.Compression.NoCompression, grpc.Compression.Gzip])
def test_real_grpc_exporter_stores_exactly_the_llm_calls(
    running_ingest: RunningIngest, compression: grpc.Compression
) -> None:
    spans = recorded_llm_spans("5", [(300, 40, False), (0, 0, True)])
    exporter = OTLPSpanExporter(
        endpoint=running_ingest.grpc_endpoint, insecure=True, compression=compression, timeout=30
    )
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    exporter.shutdown()

    stored = stored_attempts(running_ingest.database_url)
    llm = {format(s.context.span_id, "016x") for s in spans if s.name == "chat gpt-test"}
    assert set(stored) == llm
    assert {r["run_id"] for r in stored.values()} == {RUN}
    assert {r["shard_id"] for r in stored.values()} == {"5"}
    by_status = {r["status"]: r for r in stored.values()}
    assert (by_status["ok"]["prompt_tokens"], by_status["ok"]["completion_tokens"]) == (300, 40)
    assert by_status["error"]["error_type"] == "rate_limited"


@pytest.mark.slow
def test_grpc_resend_and_partial_success(running_ingest: RunningIngest) -> None:
    good = [llm_span(), llm_span()]
    bad = llm_span(prompt=2_000_000_000)  # over 10^9 tokens: rejected
    request = export_request([*good, bad], run_id="grpc-partial")
    first = export(running_ingest.grpc_endpoint, request)
    assert first.partial_success.rejected_spans == 1
    assert first.partial_success.error_message
    again = export(running_ingest.grpc_endpoint, request)
    assert again.partial_success.rejected_spans == 1
    assert set(stored_attempts(running_ingest.database_url)) == {s.span_id.hex() for s in good}
    assert run_attempts(running_ingest.database_url, "grpc-partial") == 2


@pytest.mark.slow
def test_grpc_and_http_share_one_writer_and_one_store(running_ingest: RunningIngest) -> None:
    import httpx

    request = export_request([llm_span() for _ in range(3)], run_id="both")
    export(running_ingest.grpc_endpoint, request)
    response = httpx.post(
        f"{running_ingest.http_url}/v1/traces",
        content=request.SerializeToString(),
        headers={"Content-Type": "application/x-protobuf"},
    )
    assert response.status_code == 200
    assert stored_count(running_ingest.database_url) == 3


def retry_info(error: grpc.RpcError) -> error_details_pb2.RetryInfo | None:
    """The RetryInfo detail of a rich gRPC error status, if any."""
    for key, value in error.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.RetryInfo()
                if detail.Unpack(info):
                    return info
    return None


@pytest.mark.slow
def test_database_outage_answers_unavailable_with_retry_info(
    separate_postgres: SeparatePostgres,
) -> None:
    server = start_ingest(separate_postgres.url)
    try:
        export(server.grpc_endpoint, export_request([llm_span()]))
        separate_postgres.stop()
        request = export_request([llm_span() for _ in range(2)], run_id="grpc-outage")
        with pytest.raises(grpc.RpcError) as raised:
            export(server.grpc_endpoint, request)
        assert raised.value.code() == grpc.StatusCode.UNAVAILABLE
        info = retry_info(raised.value)
        assert info is not None and info.retry_delay.seconds >= 1
        assert server.process.poll() is None

        separate_postgres.start()
        deadline = time.monotonic() + 30
        while True:  # the exporter would retry on its own; a test retries by hand
            try:
                export(server.grpc_endpoint, request)
                break
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        assert run_attempts(separate_postgres.url, "grpc-outage") == 2
    finally:
        server.stop()


@pytest.mark.parametrize(
    "method",
    [
        "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
        "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
    ],
)
@pytest.mark.slow
def test_a_grpc_gzip_bomb_is_stopped_by_the_body_budget(
    running_ingest: RunningIngest, method: str
) -> None:
    # 63 MiB of zeros, gzip-compressed by gRPC: it used to be inflated whole by gRPC
    # (up to 64 MiB per call) before any budget saw it.
    with grpc.insecure_channel(running_ingest.grpc_endpoint) as channel:
        call = channel.unary_unary(method, request_serializer=None)
        with pytest.raises(grpc.RpcError) as caught:
            call(bytes(63 * 2**20), timeout=60, compression=grpc.Compression.Gzip)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "in-flight body budget" in (caught.value.details() or "")
