"""No message content is stored (docs/configuration.md#message-content).

Real instrumentations (OpenLLMetry over OTLP/HTTP, OpenInference over OTLP/gRPC) call the
local OpenAI-compatible server with a marker string in the prompt, the system message and
a tool definition; an SDK span carries every content attribute and event of the other
families, and GenAI events arrive as log records. After ingest and a live update, the
marker and the server's completion text are readable in no column of any table. With
``TPMLEDGER_STORE_CONTENT=true`` the same scan finds them (the scan can fail).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import psycopg
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HttpSpanExporter,
)
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter

from tests.fixtures.servers import RunningIngest, free_port, start_ingest
from tests.ingest.openai_compatible_server import COMPLETION_WORDS, serve_openai_compatible
from tests.ingest.otlp_builders import json_request, json_span
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.storage.server.database import libpq_url

MARKER = "PRIVATE-PROMPT-c0ffee"
COMPLETION = "".join(COMPLETION_WORDS)  # the server's answer, also content
TOOLS: Any = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": f"tool description {MARKER}",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
]
# Every content attribute the families send (docs/configuration.md#message-content).
CONTENT_ATTRIBUTES = (
    "gen_ai.prompt",
    "gen_ai.prompt.0.content",
    "gen_ai.completion.0.content",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.definitions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "llm.input_messages.0.message.content",
    "llm.output_messages.0.message.content",
    "llm.prompts.0.content",
    "llm.tools.0.tool.json_schema",
    "llm.prompt_template.template",
    "input.value",
    "output.value",
)
# A resource attribute that carries content is dropped from every stored row too.
RESOURCE_CONTENT_KEY = "gen_ai.system_instructions"


@pytest.fixture
def openai_base_url() -> Iterator[str]:
    with serve_openai_compatible(free_port()) as base_url:
        yield base_url


def _provider(run_id: str, exporter: SpanExporter) -> TracerProvider:
    provider = TracerProvider(
        resource=Resource.create(
            {
                "tpmledger.run.id": run_id,
                "tpmledger.shard.id": "0",
                RESOURCE_CONTENT_KEY: f"be brief {MARKER}",
            }
        )
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _instrumented_calls(family: str, exporter: SpanExporter, base_url: str) -> None:
    if family == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    else:
        from openinference.instrumentation.openai import OpenAIInstrumentor  # type: ignore[no-redef]
    provider = _provider(f"content-{family}", exporter)
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        client = openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0)
        messages: Any = [
            {"role": "system", "content": f"system {MARKER}"},
            {"role": "user", "content": f"user {MARKER}"},
        ]
        client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
        stream = client.chat.completions.create(
            model="m", messages=messages, stream=True, stream_options={"include_usage": True}
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    finally:
        instrumentor.uninstrument()
        provider.shutdown()


def _sdk_span_with_every_key(ingest: RunningIngest) -> None:
    provider = _provider("content-sdk", HttpSpanExporter(endpoint=f"{ingest.http_url}/v1/traces"))
    with provider.get_tracer("test").start_as_current_span("chat m") as span:
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.usage.input_tokens", 7)
        for key in CONTENT_ATTRIBUTES:
            span.set_attribute(key, f"{key} {MARKER}")
        span.set_attribute("gen_ai.prompt.1.content", [MARKER, "second"])  # an array too
        span.add_event("gen_ai.user.message", {"content": MARKER, "role": "user"})
        span.add_event("gen_ai.choice", {"message": MARKER})
    provider.shutdown()


def _otlp_json_span(ingest: RunningIngest) -> None:
    """The OTLP/JSON path: a hand-written document with a content attribute (kvlist value)."""
    span = json_span(
        trace_id="5" * 32, span_id="6" * 16, prompt=3, completion=1, start_ns=time.time_ns()
    )
    messages = {"kvlistValue": {"values": [{"key": "content", "value": {"stringValue": MARKER}}]}}
    span["attributes"].append({"key": "gen_ai.input.messages", "value": messages})
    document = json_request([span], run_id="content-json", shard_id="0")
    answer = httpx.post(f"{ingest.http_url}/v1/traces", json=document, timeout=10)
    assert answer.status_code == 200, answer.text


def _genai_events_as_logs(ingest: RunningIngest) -> None:
    provider = LoggerProvider(resource=Resource.create({"tpmledger.run.id": "content-logs"}))
    provider.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=f"{ingest.http_url}/v1/logs"))
    )
    logger = provider.get_logger("genai")
    logger.emit(event_name="gen_ai.user.message", body={"content": MARKER})
    logger.emit(body="plain line", attributes={"gen_ai.prompt": MARKER})
    logger.emit(body="not content")
    assert provider.force_flush()
    provider.shutdown()


def _tables_holding(url: str, needle: str) -> dict[str, int]:
    """Rows of every table whose text form contains ``needle`` (every column: text, jsonb,
    arrays; bytea appears as hex, so its hex spelling is searched too)."""
    found = {}
    with psycopg.connect(libpq_url(url)) as conn:
        tables = [
            name
            for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
            ).fetchall()
        ]
        assert "attempts" in tables
        hex_needle = needle.encode().hex()
        for table in tables:
            row = conn.execute(
                f'SELECT count(*) FROM "{table}" AS t '  # names from pg_tables
                "WHERE strpos(t::text, %s) > 0 OR strpos(t::text, %s) > 0",
                (needle, hex_needle),
            ).fetchone()
            assert row is not None
            if row[0]:
                found[table] = row[0]
    return found


def _dropped(ingest: RunningIngest) -> dict[str, float]:
    text = httpx.get(f"{ingest.http_url}/metrics", timeout=10).text
    return {
        source: float(value)
        for source, value in re.findall(
            r'^tpmledger_ingest_content_attributes_dropped_total\{source="(\w+)"\} (\S+)$',
            text,
            re.MULTILINE,
        )
    }


def _stored_attempts(url: str) -> int:
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute("SELECT count(*) FROM attempts").fetchone()
        assert row is not None
        return int(row[0])


@pytest.mark.slow
def test_no_content_is_readable_anywhere_in_the_database(
    database_url: str, openai_base_url: str
) -> None:
    ingest = start_ingest(database_url)
    try:
        _instrumented_calls(
            "openllmetry",
            HttpSpanExporter(endpoint=f"{ingest.http_url}/v1/traces"),
            openai_base_url,
        )
        _instrumented_calls(
            "openinference",
            GrpcSpanExporter(endpoint=ingest.grpc_endpoint, insecure=True),
            openai_base_url,
        )
        _sdk_span_with_every_key(ingest)
        _otlp_json_span(ingest)
        _genai_events_as_logs(ingest)
        LiveUpdater(database_url).update_once()  # the derived tables too

        stored = _stored_attempts(database_url)
        assert stored == 6  # two calls per family, the SDK span, the JSON span: all measured
        assert _tables_holding(database_url, MARKER) == {}
        assert _tables_holding(database_url, COMPLETION) == {}
        dropped = _dropped(ingest)
        assert dropped["resource_attribute"] == stored - 1  # the JSON span's resource has none
        assert dropped["span_event"] == 3  # the SDK span's two content events' attributes
        assert dropped["log_record"] == 2
        # At least every key of the SDK span, and the families' message lists.
        assert dropped["span_attribute"] >= len(CONTENT_ATTRIBUTES) + 1 + 2 * 2 + 1
    finally:
        ingest.stop()

    # TPMLEDGER_STORE_CONTENT=true keeps the attributes: the same scan finds them.
    keeping = start_ingest(database_url, env={"TPMLEDGER_STORE_CONTENT": "true"})
    try:
        _sdk_span_with_every_key(keeping)
        assert _tables_holding(database_url, MARKER) == {"attempts": 1}
        assert _dropped(keeping) == {}
    finally:
        keeping.stop()
