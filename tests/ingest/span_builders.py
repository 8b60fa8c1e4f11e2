"""Builders for the normalization tests: any attribute shape, one span at a time."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

from tests.otlp_values import key_values
from tpmledger.ingest.normalize import NormalizedBatch, normalize_request
from tpmledger.storage.schema.models import ATTEMPT_COPY_COLUMNS

BASE_NS = 1_769_917_440 * 1_000_000_000  # 2026-02-01T03:44:00Z
NOW_NS = BASE_NS + 3_600 * 1_000_000_000
LLM = {"gen_ai.operation.name": "chat"}


def span(
    attributes: Mapping[str, Any] | None = None,
    *,
    name: str = "chat gpt-test",
    trace_id: bytes | None = None,
    span_id: bytes | None = None,
    parent_span_id: bytes = b"",
    start_ns: int = BASE_NS,
    end_ns: int | None = None,
    status_code: int = Status.STATUS_CODE_UNSET,
    kind: int = Span.SPAN_KIND_CLIENT,
    events: Iterable[tuple[str, int]] = (),
) -> Span:
    """One span; ``events`` are (name, time_unix_nano) pairs."""
    return Span(
        trace_id=os.urandom(16) if trace_id is None else trace_id,
        span_id=os.urandom(8) if span_id is None else span_id,
        parent_span_id=parent_span_id,
        name=name,
        kind=kind,  # type: ignore[arg-type]
        start_time_unix_nano=start_ns,
        end_time_unix_nano=start_ns + 2_000_000_000 if end_ns is None else end_ns,
        attributes=key_values(attributes or {}),
        events=[Span.Event(name=n, time_unix_nano=t) for n, t in events],
        status=Status(code=status_code),  # type: ignore[arg-type]
    )


def request(*spans: Span, resource: Mapping[str, Any] | None = None) -> ExportTraceServiceRequest:
    """A request with one resource and one scope holding ``spans``."""
    resource_spans = ResourceSpans()
    resource_spans.resource.attributes.extend(key_values(resource or {}))
    resource_spans.scope_spans.add().spans.extend(spans)
    return ExportTraceServiceRequest(resource_spans=[resource_spans])


def normalize(*spans: Span, resource: Mapping[str, Any] | None = None) -> NormalizedBatch:
    """normalize_request over one resource, with a fixed clock (NOW_NS)."""
    return normalize_request(request(*spans, resource=resource), now_ns=NOW_NS)


def as_columns(row: tuple[Any, ...]) -> dict[str, Any]:
    """An attempt row as {column: value}."""
    assert len(row) == len(ATTEMPT_COPY_COLUMNS)
    return dict(zip(ATTEMPT_COPY_COLUMNS, row, strict=True))


def normalize_one(
    attributes: Mapping[str, Any] | None = None,
    *,
    resource: Mapping[str, Any] | None = None,
    **span_fields: Any,
) -> dict[str, Any]:
    """Normalize a single span that must become a stored row; return it by column."""
    batch = normalize(span(attributes, **span_fields), resource=resource)
    assert (batch.ignored, batch.rejected) == (0, 0), batch
    assert len(batch.rows) == 1
    return as_columns(batch.rows[0])
