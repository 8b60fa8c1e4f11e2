"""execute_tool spans: stored in tool_spans (never as attempts), through the real server."""

from __future__ import annotations

import psycopg
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from tests.fixtures.servers import RunningIngest
from tests.ingest.span_builders import normalize, span
from tests.ingest.stored_rows import stored_attempts
from tpmledger.storage.server.database import libpq_url

RUN = "agent-run"


def agent_spans() -> list[ReadableSpan]:
    """One chat call holding its slot while two tools run (one fails), recorded by the SDK."""
    memory = InMemorySpanExporter()
    resource = Resource.create({"tpmledger.run.id": RUN, "tpmledger.shard.id": "s0"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("chat gpt-test") as chat:
        chat.set_attribute("gen_ai.operation.name", "chat")
        chat.set_attribute("gen_ai.usage.input_tokens", 10)
        chat.set_attribute("gen_ai.usage.output_tokens", 5)
        with tracer.start_as_current_span("execute_tool search") as tool:
            tool.set_attribute("gen_ai.operation.name", "execute_tool")
            tool.set_attribute("gen_ai.tool.name", "search")
        with tracer.start_as_current_span("execute_tool fetch") as tool:
            tool.set_attribute("gen_ai.operation.name", "execute_tool")
            tool.set_attribute("gen_ai.tool.name", "fetch")
            tool.set_status(Status(StatusCode.ERROR))
    provider.shutdown()
    return list(memory.get_finished_spans())


def stored_tools(url: str) -> list[dict[str, object]]:
    with psycopg.connect(libpq_url(url)) as conn:
        cur = conn.execute(
            "SELECT encode(span_id, 'hex') AS span_id, encode(parent_span_id, 'hex') AS parent, "
            "run_id, shard_id, tool_name, status, start_ns, end_ns FROM tool_spans "
            "ORDER BY tool_name"
        )
        names = [c.name for c in cur.description or []]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


@pytest.mark.slow
def test_tool_spans_are_stored_apart_from_attempts(running_ingest: RunningIngest) -> None:
    spans = agent_spans()
    exporter = OTLPSpanExporter(endpoint=f"{running_ingest.http_url}/v1/traces", timeout=30)
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    # A re-sent export stores nothing twice.
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    exporter.shutdown()

    chat = next(s for s in spans if s.name == "chat gpt-test")
    attempts = stored_attempts(running_ingest.database_url)
    assert set(attempts) == {format(chat.context.span_id, "016x")}
    tools = stored_tools(running_ingest.database_url)
    assert [(t["tool_name"], t["status"], t["run_id"], t["shard_id"]) for t in tools] == [
        ("fetch", "error", RUN, "s0"),
        ("search", "ok", RUN, "s0"),
    ]
    assert {t["parent"] for t in tools} == {format(chat.context.span_id, "016x")}
    search = next(s for s in spans if s.name == "execute_tool search")
    assert tools[1]["start_ns"] == search.start_time and tools[1]["end_ns"] == search.end_time


def test_a_tool_span_with_bad_times_is_rejected_not_stored() -> None:
    bad = span(
        attributes={"gen_ai.operation.name": "execute_tool"}, start_ns=2_000_000, end_ns=1_000_000
    )
    batch = normalize(bad, resource={"tpmledger.run.id": RUN})
    assert (batch.rejected, batch.ignored, batch.rows, batch.tool_rows) == (1, 0, [], [])
    plain = span(attributes={"gen_ai.operation.name": "embeddings"})
    batch = normalize(plain, resource={"tpmledger.run.id": RUN})
    assert (batch.rejected, batch.ignored, batch.tool_rows) == (0, 1, [])
