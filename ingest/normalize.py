"""Normalization: an OTLP ``ExportTraceServiceRequest`` → attempt rows (SPEC §2).

The request is walked once. Resource attributes are converted (and JSON-encoded) once
per ``ResourceSpans``; each span's attributes are converted once. Which key supplies
which field, which token keys must be validated and which convention family gets the
credit depend only on the *set of keys* present, so they are resolved once per distinct
key shape (:func:`_plan_for`, cached) and the per-span work is plain dictionary reads.

Span attributes override resource attributes of the same key.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

import orjson
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from ingest import conventions as conv
from ingest import span_validation as check
from ingest.attribute_values import (
    as_int,
    as_seconds,
    as_string_list,
    as_text,
    key_values_to_dict,
    strip_nul,
)

MAX_REASONS: Final = 5
_INT32_MAX: Final = 2**31 - 1
_STATUS_ERROR: Final = Status.STATUS_CODE_ERROR
_ZERO_SPAN_ID: Final = bytes(8)


@dataclass(slots=True)
class NormalizedBatch:
    """The outcome of normalizing one export request."""

    rows: list[tuple[Any, ...]]  # attempt rows in storage.models.ATTEMPT_COPY_COLUMNS order
    ignored: int  # spans that are not LLM calls (counted, not stored)
    rejected: int  # invalid spans (reported via OTLP partial success)
    reject_reasons: list[str]  # distinct human-readable reasons, at most MAX_REASONS


@dataclass(frozen=True, slots=True)
class _Plan:
    """Key resolution for one attribute-key shape."""

    # (field, key, from_span) of the winning key of every field present.
    sources: tuple[tuple[str, str, bool], ...]
    # (key, from_span) of every token key present: all of them are validated.
    token_keys: tuple[tuple[str, bool], ...]
    # Family that supplied the tokens; None when the span carries no token key.
    token_convention: str | None
    # Family credited when gen_ai.operation.name identifies the span.
    operation_convention: str


@lru_cache(maxsize=4096)
def _plan_for(resource_keys: tuple[str, ...], span_keys: tuple[str, ...], name: str) -> _Plan:
    span_key_set = frozenset(span_keys)
    best: dict[str, tuple[int, str, bool]] = {}
    tokens: dict[str, bool] = {}
    # Resource first, then span: a span key replaces a resource key of the same name.
    for keys, from_span in ((resource_keys, False), (span_keys, True)):
        for key in keys:
            entry = conv.KEY_FIELD.get(key)
            if entry is None:
                continue
            field, rank = entry
            if key in conv.TOKEN_KEYS:
                tokens[key] = from_span
            current = best.get(field)
            if current is None or rank < current[0] or (rank == current[0] and from_span):
                best[field] = (rank, key, from_span)
    token_convention = None
    for field in conv.TOKEN_FIELDS:
        if field in best:
            token_convention = conv.convention_for(best[field][1], span_key_set, name)
            break
    return _Plan(
        sources=tuple((field, key, from_span) for field, (_, key, from_span) in best.items()),
        token_keys=tuple(tokens.items()),
        token_convention=token_convention,
        operation_convention=conv.convention_for(conv.OPERATION_NAME_KEY, span_key_set, name),
    )


def _dumps(values: dict[str, Any]) -> str:
    return orjson.dumps(values).decode()


def _resource_context(attributes: Any) -> tuple[dict[str, Any], tuple[str, ...], str]:
    values = key_values_to_dict(attributes)
    encoded = _dumps(values)
    if "\\u0000" in encoded:
        values = strip_nul(values)
        encoded = _dumps(values)
    return values, tuple(values), encoded


def normalize_request(
    request: ExportTraceServiceRequest, *, now_ns: int | None = None
) -> NormalizedBatch:
    """Turn every LLM-call span of ``request`` into an attempt row; count the rest."""
    latest_ns = check.latest_timestamp_ns(time.time_ns() if now_ns is None else now_ns)
    rows: list[tuple[Any, ...]] = []
    ignored = rejected = 0
    reasons: dict[str, None] = {}
    for resource_spans in request.resource_spans:
        resource = _resource_context(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                outcome = normalize_span(span, resource, latest_ns)
                if outcome is None:
                    ignored += 1
                elif type(outcome) is str:
                    rejected += 1
                    if len(reasons) < MAX_REASONS:
                        reasons[outcome] = None
                else:
                    rows.append(outcome)  # type: ignore[arg-type]
    return NormalizedBatch(rows, ignored, rejected, list(reasons))


def normalize_span(
    span: Span, resource: tuple[dict[str, Any], tuple[str, ...], str], latest_ns: int
) -> tuple[Any, ...] | str | None:
    """One span → its attempt row, a rejection reason (``str``), or ``None`` if not an LLM call.

    ``resource`` is ``(attributes, attribute keys, attributes as JSON)`` of the span's
    resource; ``latest_ns`` the newest acceptable timestamp (now + 1 day).
    """
    resource_values, resource_keys, resource_json = resource
    span_values = key_values_to_dict(span.attributes)
    span_json = _dumps(span_values)
    name = span.name
    if "\\u0000" in span_json or "\x00" in name:
        span_values = strip_nul(span_values)
        span_json = _dumps(span_values)
        name = name.replace("\x00", "")
    plan = _plan_for(resource_keys, tuple(span_values), name)
    values = {
        field: (span_values if from_span else resource_values)[key]
        for field, key, from_span in plan.sources
    }

    # LLM-call detection (SPEC §2): a token key, an LLM operation name, an OpenInference
    # LLM span, or vLLM's llm_request span; the detecting family is credited when no
    # token key says otherwise.
    convention = plan.token_convention
    if convention is None:
        if name == conv.VLLM_SPAN_NAME:
            convention = conv.VLLM.name
        elif values.get("llm_span_kind") == conv.OPENINFERENCE_LLM_KIND:
            convention = conv.OPENINFERENCE.name
        elif values.get("operation_name") in conv.LLM_OPERATION_NAMES:
            convention = plan.operation_convention
        else:
            return None

    trace_id = span.trace_id
    span_id = span.span_id
    parent = span.parent_span_id
    start_ns = span.start_time_unix_nano
    end_ns = span.end_time_unix_nano
    reason = check.check_ids(trace_id, span_id, parent) or check.check_times(
        start_ns, end_ns, latest_ns
    )
    if reason is not None:
        return reason
    for key, from_span in plan.token_keys:
        if check.token_count((span_values if from_span else resource_values)[key]) is None:
            return check.token_reason(key)
    tokens = [check.token_count(values.get(field)) for field in conv.TOKEN_FIELDS]

    run_id = as_text(values.get("run_id")) or "unassigned"
    call_id = as_text(values.get("call_id"))
    ttft_s = as_seconds(values.get("ttft_s"))
    if ttft_s is None and span.events:
        ttft_s = _first_chunk_ttft(span, start_ns)
    http_status = as_int(values.get("http_status"), 100, 599)
    error_type = as_text(values.get("error_type")) or None
    if (
        span.status.code == _STATUS_ERROR
        or error_type is not None
        or (http_status is not None and http_status >= 400)
    ):
        status = "error"
        if error_type is None:
            error_type = (
                f"http_{http_status}" if http_status is not None and http_status >= 400 else "error"
            )
    else:
        status = "ok"

    # Column order = storage.models.ATTEMPT_COPY_COLUMNS.
    return (
        trace_id,
        span_id,
        parent if parent and parent != _ZERO_SPAN_ID else None,
        run_id,
        _shard_id(values),
        as_int(values.get("declared_shard_count"), 1, _INT32_MAX),
        as_int(values.get("concurrency_cap"), 1, _INT32_MAX),
        as_text(values.get("sweep_id")),
        call_id or span_id.hex(),
        call_id is not None,
        as_int(values.get("resend_count"), 0, _INT32_MAX),
        start_ns,
        end_ns,
        as_seconds(values.get("queue_wait_s")),
        ttft_s,
        *tokens,
        as_text(values.get("model")),
        as_text(values.get("provider")),
        as_text(values.get("operation_name")),
        as_string_list(values.get("finish_reasons")),
        status,
        error_type,
        http_status,
        convention,
        name,
        int(span.kind),
        span_json,
        resource_json,
    )


def _shard_id(values: dict[str, Any]) -> str:
    # tpmledger.shard.id / service.instance.id (resolved by the plan), else
    # host.name:process.pid, else host.name alone, else "unknown".
    shard = as_text(values.get("shard_id"))
    if shard:
        return shard
    host = as_text(values.get("host_name"))
    if host:
        pid = as_text(values.get("process_pid"))
        return f"{host}:{pid}" if pid else host
    return "unknown"


def _first_chunk_ttft(span: Span, start_ns: int) -> float | None:
    # OpenLLMetry: TTFT = first gen_ai.content.completion.chunk event − span start.
    first = None
    for event in span.events:
        if event.name == conv.COMPLETION_CHUNK_EVENT and (
            first is None or event.time_unix_nano < first
        ):
            first = event.time_unix_nano
    if first is None or first < start_ns:
        return None
    return (first - start_ns) / 1e9
