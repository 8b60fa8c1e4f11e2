"""OTLP/HTTP ingest end to end: the real server process, real exporters, real PostgreSQL."""

from __future__ import annotations

import gzip
import json
import os
import time
from collections.abc import Iterator

import httpx
import pytest
from google.rpc import error_details_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from tests.fixtures.servers import RunningIngest, SeparatePostgres, start_ingest, wait_for
from tests.ingest.otlp_builders import export_request, json_request, json_span, llm_span
from tests.ingest.stored_rows import run_attempts, stored_attempts, stored_count

PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}
RUN = "newgen_full_20260201_030151_sharded"


def recorded_llm_spans(shard: str, calls: list[tuple[int, int, bool]]) -> list[ReadableSpan]:
    """Spans recorded by the real OpenTelemetry SDK for (prompt, completion, failed) calls."""
    memory = InMemorySpanExporter()
    resource = Resource.create(
        {
            "tpmledger.run.id": RUN,
            "tpmledger.shard.id": shard,
            "tpmledger.shard.count": 8,
            "tpmledger.concurrency.cap": 16,
        }
    )
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("shard-worker")
    for prompt, completion, failed in calls:
        with tracer.start_as_current_span("chat gpt-test") as span:
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute("gen_ai.request.model", "gpt-test")
            if failed:
                span.set_attribute("error.type", "rate_limited")
                span.set_status(Status(StatusCode.ERROR))
            else:
                span.set_attribute("gen_ai.usage.input_tokens", prompt)
                span.set_attribute("gen_ai.usage.output_tokens", completion)
        with tracer.start_as_current_span("not an llm call"):
            pass
    provider.shutdown()
    return list(memory.get_finished_spans())


def post(server: RunningIngest, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{server.http_url}/v1/traces", content=body, headers=headers, timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_real_http_exporter_stores_exactly_the_llm_calls(
    running_ingest: RunningIngest, compression: Compression
) -> None:
    spans = recorded_llm_spans("3", [(120, 30, False), (80, 7, False), (0, 0, True)])
    exporter = OTLPSpanExporter(
        endpoint=f"{running_ingest.http_url}/v1/traces", compression=compression, timeout=30
    )
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    exporter.shutdown()

    # 200 means committed: the rows are there the moment export() returned.
    stored = stored_attempts(running_ingest.database_url)
    llm = {format(s.context.span_id, "016x"): s for s in spans if s.name == "chat gpt-test"}
    assert set(stored) == set(llm)
    tokens = sorted(
        ((r["prompt_tokens"], r["completion_tokens"], r["status"]) for r in stored.values()),
        key=str,
    )
    assert tokens == [(120, 30, "ok"), (80, 7, "ok"), (None, None, "error")]
    for span_hex, row in stored.items():
        assert row["run_id"] == RUN
        assert row["shard_id"] == "3"
        assert row["declared_shard_count"] == 8
        assert bytes(row["trace_id"]) == llm[span_hex].context.trace_id.to_bytes(16, "big")
        assert row["start_ns"] == llm[span_hex].start_time
    (failed,) = (r for r in stored.values() if r["status"] == "error")
    assert failed["error_type"] == "rate_limited"
    assert run_attempts(running_ingest.database_url, RUN) == 3

    metrics = httpx.get(f"{running_ingest.http_url}/metrics").text
    assert "tpmledger_ingest_spans_received_total 6.0" in metrics
    assert "tpmledger_ingest_spans_stored_total 3.0" in metrics
    assert "tpmledger_ingest_spans_ignored_total 3.0" in metrics
    assert "tpmledger_ingest_commit_latency_seconds_bucket" in metrics


@pytest.mark.slow
def test_hand_written_otlp_json_is_stored_and_answered_in_json(
    running_ingest: RunningIngest,
) -> None:
    start = time.time_ns() - 10_000_000_000
    trace = os.urandom(16).hex()
    spans = [
        json_span(
            trace_id=trace, span_id="0000000000000a01", prompt="100", completion=5, start_ns=start
        ),
        json_span(
            trace_id=trace,
            span_id="0000000000000a02",
            prompt=7,
            completion="9",
            start_ns=start,
            parentSpanId="0000000000000a01",
        ),
    ]
    body = json.dumps(json_request(spans, run_id="json-run", shard_id="s1")).encode()
    response = post(running_ingest, body, {"Content-Type": "application/json; charset=utf-8"})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {}  # full success: no partialSuccess
    stored = stored_attempts(running_ingest.database_url)
    assert set(stored) == {"0000000000000a01", "0000000000000a02"}
    assert stored["0000000000000a01"]["prompt_tokens"] == 100
    assert stored["0000000000000a02"]["completion_tokens"] == 9
    assert all(bytes(r["trace_id"]).hex() == trace for r in stored.values())
    assert {r["run_id"] for r in stored.values()} == {"json-run"}
    assert {r["shard_id"] for r in stored.values()} == {"s1"}


@pytest.mark.slow
def test_resending_the_same_export_stores_nothing_twice(running_ingest: RunningIngest) -> None:
    body = export_request([llm_span() for _ in range(4)], run_id="resend").SerializeToString()
    for _ in range(3):
        assert post(running_ingest, body, PROTOBUF).status_code == 200
    assert post(running_ingest, gzip.compress(body), {**PROTOBUF, "Content-Encoding": "gzip"})
    assert stored_count(running_ingest.database_url) == 4
    assert run_attempts(running_ingest.database_url, "resend") == 4


@pytest.mark.slow
def test_invalid_spans_are_rejected_through_partial_success(
    running_ingest: RunningIngest,
) -> None:
    good = [llm_span(), llm_span()]
    now = time.time_ns()
    end_before_start = llm_span()
    end_before_start.end_time_unix_nano = end_before_start.start_time_unix_nano - 1
    bad_tokens = llm_span(prompt=-5)
    body = export_request([*good, end_before_start, bad_tokens]).SerializeToString()
    response = post(running_ingest, body, PROTOBUF)
    assert response.status_code == 200
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert answer.partial_success.rejected_spans == 2
    assert answer.partial_success.error_message
    assert set(stored_attempts(running_ingest.database_url)) == {s.span_id.hex() for s in good}

    json_body = json_request(
        [
            json_span(
                trace_id=os.urandom(16).hex(),
                span_id="00000000000000b1",
                prompt=1,
                completion=1,
                start_ns=now - 5_000_000_000,
            ),
            json_span(
                trace_id="00" * 16,
                span_id="00000000000000b2",
                prompt=1,
                completion=1,
                start_ns=now - 5_000_000_000,
            ),
        ],
        run_id="r",
        shard_id="0",
    )
    response = post(running_ingest, json.dumps(json_body).encode(), JSON)
    assert response.status_code == 200
    partial = response.json()["partialSuccess"]
    assert int(partial["rejectedSpans"]) == 1 and partial["errorMessage"]
    assert "00000000000000b1" in stored_attempts(running_ingest.database_url)


def status_of(response: httpx.Response) -> status_pb2.Status:
    if response.headers["content-type"].startswith("application/json"):
        document = response.json()
        return status_pb2.Status(code=document.get("code", 0), message=document["message"])
    return status_pb2.Status.FromString(response.content)


@pytest.mark.slow
def test_bad_input_gets_the_spec_codes_and_never_crashes(running_ingest: RunningIngest) -> None:
    valid = export_request([llm_span()]).SerializeToString()
    cases: list[tuple[bytes, dict[str, str], int]] = [
        (b"\xff\xff\xff garbage", PROTOBUF, 400),
        (b"{not json", JSON, 400),
        (b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"xyz"}]}]}]}', JSON, 400),
        (valid, {"Content-Type": "text/plain"}, 415),
        (valid, {}, 415),
        (valid, {**PROTOBUF, "Content-Encoding": "br"}, 415),
        (valid, {**PROTOBUF, "Content-Encoding": "gzip"}, 400),  # says gzip, is not
        (gzip.compress(valid)[:-9], {**PROTOBUF, "Content-Encoding": "gzip"}, 400),
        (b"\x00" * (16 * 1024 * 1024 + 1), PROTOBUF, 413),
        (gzip.compress(bytes(65 * 1024 * 1024)), {**PROTOBUF, "Content-Encoding": "gzip"}, 413),
    ]
    for body, headers, expected in cases:
        response = post(running_ingest, body, headers)
        assert response.status_code == expected, (headers, response.text[:200])
        assert status_of(response).message
        assert "retry-after" not in response.headers

    def chunked() -> Iterator[bytes]:  # no Content-Length: the streaming limit must catch it
        for _ in range(17):
            yield b"\x00" * (1024 * 1024)

    response = httpx.post(
        f"{running_ingest.http_url}/v1/traces", content=chunked(), headers=PROTOBUF, timeout=30
    )
    assert response.status_code == 413

    assert running_ingest.process.poll() is None
    assert httpx.get(f"{running_ingest.http_url}/healthz").status_code == 200
    assert post(running_ingest, valid, PROTOBUF).status_code == 200
    assert stored_count(running_ingest.database_url) == 1


@pytest.mark.slow
def test_health_and_readiness(running_ingest: RunningIngest) -> None:
    assert httpx.get(f"{running_ingest.http_url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{running_ingest.http_url}/readyz").json() == {"status": "ready"}
    openapi = httpx.get(f"{running_ingest.http_url}/openapi.json").json()
    assert "/v1/traces" in openapi["paths"] and "/v1/runs" in openapi["paths"]


@pytest.mark.slow
def test_ingest_refuses_to_start_on_a_schema_behind_the_code(empty_database_url: str) -> None:
    with pytest.raises(RuntimeError, match=r"(?s)exited with 2:.*run `tpmledger migrate`"):
        start_ingest(empty_database_url, ready_path="/healthz")


@pytest.mark.slow
def test_readyz_is_503_when_the_schema_falls_behind_and_nothing_migrates_it(
    database_url: str,
) -> None:
    from tpmledger.storage.server import migrate

    server = start_ingest(database_url)
    try:
        migrate.downgrade(database_url, "-1")  # an operator rolls the schema back under it
        answer = httpx.get(f"{server.http_url}/readyz")
        assert answer.status_code == 503
        assert "run `tpmledger migrate`" in answer.json()["reason"]
        assert not migrate.is_at_head(database_url)  # ingest changed nothing
        migrate.upgrade(database_url)
        assert httpx.get(f"{server.http_url}/readyz").status_code == 200
    finally:
        server.stop()


@pytest.mark.slow
def test_database_outage_answers_503_and_the_retry_is_stored(
    separate_postgres: SeparatePostgres,
) -> None:
    server = start_ingest(separate_postgres.url)
    try:
        body = export_request([llm_span() for _ in range(3)], run_id="outage").SerializeToString()
        warm_up = export_request([llm_span()]).SerializeToString()
        assert post(server, warm_up, PROTOBUF).status_code == 200
        separate_postgres.stop()

        response = post(server, body, PROTOBUF)
        assert response.status_code == 503
        assert int(response.headers["retry-after"]) >= 1
        status = status_pb2.Status.FromString(response.content)
        retry = error_details_pb2.RetryInfo()
        assert status.details and status.details[0].Unpack(retry)
        assert httpx.get(f"{server.http_url}/readyz").status_code == 503
        assert httpx.get(f"{server.http_url}/healthz").status_code == 200
        assert server.process.poll() is None

        separate_postgres.start()
        wait_for(lambda: httpx.get(f"{server.http_url}/readyz").status_code == 200, timeout=30)
        assert post(server, body, PROTOBUF).status_code == 200
        assert run_attempts(separate_postgres.url, "outage") == 3
    finally:
        server.stop()


@pytest.mark.slow
def test_sigterm_answers_in_flight_requests_and_exits_cleanly(database_url: str) -> None:
    server = start_ingest(database_url)
    body = export_request([llm_span() for _ in range(50)], run_id="stop").SerializeToString()
    assert post(server, body, PROTOBUF).status_code == 200
    assert server.stop() == 0
    assert "ingest stopped" in server.log_path.read_text()
    assert run_attempts(database_url, "stop") == 50


def test_readyz_is_not_ready_while_the_commit_writer_is_stuck(database_url: str) -> None:
    """A lock held on attempts (as a run-away background query's lock queue did) stalls
    every commit: /readyz must say so instead of "ready", and recover when it clears."""
    import threading

    import psycopg

    from tpmledger.storage.server.database import libpq_url

    server = start_ingest(database_url, env={"TPMLEDGER_COMMIT_STUCK_AFTER_S": "1"})
    body = export_request([llm_span()]).SerializeToString()
    answers: list[int] = []
    try:
        with psycopg.connect(libpq_url(database_url)) as holder:
            holder.execute("LOCK TABLE attempts IN SHARE MODE")  # COPY waits for it
            export = threading.Thread(
                target=lambda: answers.append(
                    httpx.post(
                        f"{server.http_url}/v1/traces",
                        content=body,
                        headers={"Content-Type": "application/x-protobuf"},
                        timeout=60,
                    ).status_code
                )
            )
            export.start()
            stuck = wait_for(
                lambda: (
                    (r := httpx.get(f"{server.http_url}/readyz", timeout=10)).status_code == 503
                    and r
                ),
                timeout=20,
            )
            assert "commit writer" in stuck.json()["reason"]
        export.join(30)  # the lock is gone: the commit goes through
        assert answers == [200]
        assert httpx.get(f"{server.http_url}/readyz", timeout=10).status_code == 200
    finally:
        server.stop()
