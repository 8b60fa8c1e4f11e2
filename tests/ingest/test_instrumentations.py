"""Real instrumentations → real exporters → the running ingest → rows in PostgreSQL.

OpenLLMetry (``opentelemetry-instrumentation-openai``) exports over OTLP/HTTP protobuf,
OpenInference (``openinference-instrumentation-openai``) over OTLP/gRPC; both wrap the
real ``openai`` client talking to the local OpenAI-compatible test server. Each test
makes four calls in order: plain, streamed, a 429 and a 500.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import psycopg
import pytest
from openai.types.chat import ChatCompletionMessageParam
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from psycopg.rows import dict_row

from tests.fixtures.servers import RunningIngest, free_port
from tests.ingest.openai_compatible_server import (
    FIRST_CHUNK_DELAY_S,
    serve_openai_compatible,
    usage_for,
)
from tpmledger.storage.server.database import libpq_url

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Say hello."}]
USAGE = usage_for(MESSAGES)


@pytest.fixture
def openai_base_url() -> Iterator[str]:
    with serve_openai_compatible(free_port()) as base_url:
        yield base_url


def _instrumentor(family: str) -> Any:
    if family == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as OpenLLMetry

        return OpenLLMetry()
    from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInference

    return OpenInference()


def _exporter(family: str, ingest: RunningIngest) -> SpanExporter:
    if family == "openllmetry":
        return HttpSpanExporter(endpoint=f"{ingest.http_url}/v1/traces")
    return GrpcSpanExporter(endpoint=ingest.grpc_endpoint, insecure=True)


def _make_calls(base_url: str) -> None:
    # max_retries=0: one attempt (one span) per call, so the failures stay failures.
    client = openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0)
    client.chat.completions.create(model="model-plain", messages=MESSAGES)
    stream = client.chat.completions.create(
        model="model-stream",
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="status-429", messages=MESSAGES)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="status-500", messages=MESSAGES)


def _stored(database_url: str, run_id: str) -> list[dict[str, Any]]:
    with psycopg.connect(libpq_url(database_url), row_factory=dict_row) as conn:
        return conn.execute(
            "SELECT shard_id, prompt_tokens, completion_tokens, reported_total_tokens, "
            "status, error_type, convention, ttft_s, model, start_ns, end_ns "
            "FROM attempts WHERE run_id = %s ORDER BY start_ns",
            (run_id,),
        ).fetchall()


# family → (error_type of the 429, of the 500, model stored for failed calls)
EXPECTED_FAILURES = {
    # OpenLLMetry sets error.type to the client exception's class name.
    "openllmetry": ("RateLimitError", "InternalServerError", ("status-429", "status-500")),
    # OpenInference sets only the span status and an exception event: error_type is the
    # event's exception.type without its module; the model is the invocation parameters'.
    "openinference": ("RateLimitError", "InternalServerError", ("status-429", "status-500")),
}


@pytest.mark.slow
def test_real_instrumentations_are_stored(
    running_ingest: RunningIngest, openai_base_url: str
) -> None:
    # Both families against one ingest process: starting ingest is the slow part.
    for family in ("openllmetry", "openinference"):
        _export_calls(family, running_ingest, openai_base_url)
        _check_stored(family, running_ingest.database_url)


def _export_calls(family: str, ingest: RunningIngest, base_url: str) -> None:
    provider = TracerProvider(
        resource=Resource.create(
            {"tpmledger.run.id": f"instrumented-{family}", "tpmledger.shard.id": "7"}
        )
    )
    # Synchronous export: each span's export returns after ingest committed it (200).
    provider.add_span_processor(SimpleSpanProcessor(_exporter(family, ingest)))
    instrumentor = _instrumentor(family)
    instrumentor.instrument(tracer_provider=provider)
    try:
        _make_calls(base_url)
    finally:
        instrumentor.uninstrument()
        provider.shutdown()


def _check_stored(family: str, database_url: str) -> None:
    rows = _stored(database_url, f"instrumented-{family}")
    assert len(rows) == 4, (family, rows)
    plain, streamed, rate_limited, server_error = rows
    for row in rows:
        assert (row["convention"], row["shard_id"]) == (family, "7")
    for row, ok_model in ((plain, "model-plain"), (streamed, "model-stream")):
        assert (row["status"], row["error_type"], row["model"]) == ("ok", None, ok_model)
        assert (row["prompt_tokens"], row["completion_tokens"]) == (
            USAGE["prompt_tokens"],
            USAGE["completion_tokens"],
        )
        assert row["reported_total_tokens"] == USAGE["total_tokens"]
    # TTFT only for the stream: the server waits FIRST_CHUNK_DELAY_S before the first chunk.
    assert plain["ttft_s"] is None
    duration_s = (streamed["end_ns"] - streamed["start_ns"]) / 1e9
    assert FIRST_CHUNK_DELAY_S <= streamed["ttft_s"] <= duration_s
    error_429, error_500, failed_models = EXPECTED_FAILURES[family]
    for row, error_type, model in (
        (rate_limited, error_429, failed_models[0]),
        (server_error, error_500, failed_models[1]),
    ):
        assert (row["status"], row["error_type"], row["model"]) == ("error", error_type, model)
        assert (row["prompt_tokens"], row["completion_tokens"], row["ttft_s"]) == (None, None, None)
