"""Builders for OTLP requests used by the ingest tests (protobuf messages and OTLP/JSON)."""

from __future__ import annotations

import os
import time
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

from tests.otlp_values import key_value


def llm_span(
    *,
    prompt: int = 100,
    completion: int = 50,
    error: bool = False,
    trace_id: bytes | None = None,
    span_id: bytes | None = None,
    start_ns: int | None = None,
    **attributes: Any,
) -> Span:
    """A GenAI chat span with token usage (docs/conventions.md semconv keys)."""
    start = start_ns if start_ns is not None else time.time_ns() - 2_000_000_000
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.usage.input_tokens": prompt,
        "gen_ai.usage.output_tokens": completion,
        **attributes,
    }
    return Span(
        trace_id=trace_id or os.urandom(16),
        span_id=span_id or os.urandom(8),
        name="chat gpt-test",
        kind=Span.SPAN_KIND_CLIENT,
        start_time_unix_nano=start,
        end_time_unix_nano=start + 1_000_000_000,
        attributes=[key_value(k, v) for k, v in attrs.items()],
        status=Status(code=Status.STATUS_CODE_ERROR if error else Status.STATUS_CODE_UNSET),
    )


def export_request(
    spans: list[Span], *, run_id: str = "run-test", shard_id: str = "3"
) -> ExportTraceServiceRequest:
    """One request with one resource (run and shard attributes) holding ``spans``."""
    resource = Resource(
        attributes=[
            key_value("tpmledger.run.id", run_id),
            key_value("tpmledger.shard.id", shard_id),
            key_value("tpmledger.shard.count", 8),
        ]
    )
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=spans)])]
    )


def json_span(
    *, trace_id: str, span_id: str, prompt: Any, completion: Any, start_ns: int, **extra: Any
) -> dict[str, Any]:
    """A span as hand-written OTLP/JSON: hex ids, int64 as string, enum integers, camelCase."""
    return {
        "traceId": trace_id,
        "spanId": span_id,
        "name": "chat gpt-json",
        "kind": 3,
        "startTimeUnixNano": str(start_ns),
        "endTimeUnixNano": start_ns + 1_500_000_000,
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.usage.input_tokens", "value": {"intValue": prompt}},
            {"key": "gen_ai.usage.output_tokens", "value": {"intValue": completion}},
        ],
        "status": {"code": 0},
        **extra,
    }


def json_request(spans: list[dict[str, Any]], *, run_id: str, shard_id: str) -> dict[str, Any]:
    """An OTLP/JSON ExportTraceServiceRequest document."""
    return {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [
                        {"key": "tpmledger.run.id", "value": {"stringValue": run_id}},
                        {"key": "tpmledger.shard.id", "value": {"stringValue": shard_id}},
                    ]
                },
                "scopeSpans": [{"scope": {"name": "hand-written"}, "spans": spans}],
            }
        ]
    }
