"""Normalization: an OTLP ``ExportTraceServiceRequest`` → attempt rows (docs/conventions.md).

The request is walked once, through the lean wire view of :mod:`ingest.trace_view`.
Resource attributes are decoded (and JSON-encoded) once per ``ResourceSpans``; each
span's attributes are decoded once, mostly from the decoder's cache. Which key supplies
which field, which token keys must be validated and which convention family gets the
credit depend only on the *set of keys* present, so they are resolved once per distinct
key shape (:mod:`ingest.span_plan`) and the per-span work is plain dictionary reads.

Span attributes override resource attributes of the same key.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Final

import orjson
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from tpmledger.ingest import conventions as conv
from tpmledger.ingest import span_validation as check
from tpmledger.ingest.attribute_values import strip_nul
from tpmledger.ingest.content_filter import ContentDrops, content_keys_of, without
from tpmledger.ingest.failure_kinds import failure
from tpmledger.ingest.http_attempts import HTTP_CONVENTION, is_http_attempt
from tpmledger.ingest.quota_headers import NO_QUOTA, quota_values
from tpmledger.ingest.span_plan import PLAN_CACHE, ResourceContext, plan_for
from tpmledger.ingest.tool_spans import ToolSpanRow, is_tool_span, tool_span_row
from tpmledger.ingest.trace_view import AttributeDecoder, parse_request_view
from tpmledger.storage.codecs.attempt_row import (
    attempt_row,
    description_part,
    identity_part,
    measures_part,
)
from tpmledger.storage.schema.minute_keys import WHOLE_RUN

MAX_REASONS: Final = 5
_ZERO_SPAN_ID: Final = bytes(8)
_REASON_ATTRIBUTES: Final = "span attributes are not valid OTLP KeyValues"
_REASON_NAME: Final = "span name is not valid UTF-8"
_REASON_RESOURCE: Final = "resource attributes are not valid OTLP KeyValues (e.g. invalid UTF-8)"
# Shared by every request: the attribute encodings of a fleet repeat across requests.
_DECODER: Final = AttributeDecoder()


def cache_bytes() -> dict[str, int]:
    """Bytes held by this process's normalizer caches, by cache (``/metrics``:
    ``tpmledger_ingest_cache_bytes``)."""
    return {"attributes": _DECODER.cached_bytes, "plans": PLAN_CACHE.bytes}


@dataclass(slots=True)
class NormalizedBatch:
    """The outcome of normalizing one export request."""

    rows: list[tuple[Any, ...]]  # attempt rows in storage.schema.attempt_columns order
    ignored: int  # spans that are not LLM calls (counted, not stored)
    rejected: int  # invalid spans (reported via OTLP partial success)
    reject_reasons: list[str]  # distinct human-readable reasons, at most MAX_REASONS
    # execute_tool spans, stored in their own table (ingest/tool_spans.py)
    tool_rows: list[ToolSpanRow] = dataclasses.field(default_factory=list)
    # message content left out of the stored rows (ingest/content_filter.py)
    content: ContentDrops = dataclasses.field(default_factory=ContentDrops)


def _dumps(values: dict[str, Any]) -> str:
    return orjson.dumps(values).decode()


def _resource_context(encoded_attributes: Any, keep_content: bool = False) -> ResourceContext:
    try:
        values = _DECODER.decode(encoded_attributes)
    except DecodeError:
        # Without its attributes a span cannot be attributed to its run and shard: its
        # LLM spans are rejected with this reason rather than stored under "unassigned".
        return ResourceContext({}, "{}", _REASON_RESOURCE)
    encoded = _dumps(values)
    invalid = None
    if "\\u0000" in encoded:
        # A NUL in a run or shard id is refused (its spans are rejected); elsewhere stripped.
        invalid = check.REASON_ID_LENGTH if check.nul_in_ids(values) else None
        values = strip_nul(values)
        encoded = _dumps(values)
    content = frozenset() if keep_content else content_keys_of(tuple(values))
    context = ResourceContext(values, without(values, content) if content else encoded, invalid)
    context.content_dropped = len(content)
    return context


def normalize_request(
    request: ExportTraceServiceRequest, *, now_ns: int | None = None, keep_content: bool = False
) -> NormalizedBatch:
    """Turn every LLM-call span of ``request`` into an attempt row; count the rest.

    Message content is left out of the stored attributes unless ``keep_content``
    (``TPMLEDGER_STORE_CONTENT``; ingest/content_filter.py).
    """
    return normalize_payload(request.SerializeToString(), now_ns=now_ns, keep_content=keep_content)


def normalize_payload(
    payload: bytes | bytearray, *, now_ns: int | None = None, keep_content: bool = False
) -> NormalizedBatch:
    """Like :func:`normalize_request`, from the serialized (binary protobuf) request.

    Cheaper when the caller holds the bytes anyway (OTLP/HTTP protobuf, gRPC). Raises
    ``google.protobuf.message.DecodeError`` when ``payload`` is not a valid request.
    """
    view = parse_request_view(payload)
    latest_ns = check.latest_timestamp_ns(time.time_ns() if now_ns is None else now_ns)
    rows: list[tuple[Any, ...]] = []
    tools: list[ToolSpanRow] = []
    ignored = rejected = 0
    reasons: dict[str, None] = {}
    content = ContentDrops(keep=keep_content)
    for resource_spans in view.resource_spans:
        resource = _resource_context(resource_spans.resource.attributes, keep_content)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                outcome = normalize_span(span, resource, latest_ns, content)
                if outcome is None:
                    ignored += 1
                elif type(outcome) is str:
                    rejected += 1
                    if len(reasons) < MAX_REASONS:
                        reasons[outcome] = None
                elif type(outcome) is ToolSpanRow:
                    tools.append(outcome)
                else:
                    rows.append(outcome)  # type: ignore[arg-type]
    return NormalizedBatch(rows, ignored, rejected, list(reasons), tools, content)


def normalize_span(
    span: Any, resource: ResourceContext, latest_ns: int, content: ContentDrops | None = None
) -> tuple[Any, ...] | ToolSpanRow | str | None:
    """One span → its attempt row, a tool span row (``execute_tool``), a rejection reason
    (``str``), or ``None`` if neither.

    ``span`` is a span of the :mod:`ingest.trace_view` view; ``latest_ns`` is the newest
    acceptable timestamp (now + 1 day); ``content`` drops and counts message content
    (dropped uncounted when ``None``).
    """
    try:
        span_values = _DECODER.decode(span.attributes)
    except DecodeError:
        return _REASON_ATTRIBUTES
    span_json = _dumps(span_values)
    try:
        name = span.name.decode()
    except UnicodeDecodeError:
        return _REASON_NAME
    nul_in_id = False
    if "\\u0000" in span_json or "\x00" in name:
        nul_in_id = check.nul_in_ids(span_values)  # refused below if it is an LLM span
        span_values = strip_nul(span_values)
        span_json = _dumps(span_values)
        name = name.replace("\x00", "")
    plan = plan_for(resource.keys, tuple(span_values), name == conv.VLLM_SPAN_NAME)
    resource_fields, resource_reason = resource.typed_fields(plan)
    fields = resource_fields.copy()
    for field, key, read in plan.span_fields:
        fields[field] = read(span_values[key])

    # LLM-call detection (docs/conventions.md): a token key, an LLM operation name, an OpenInference
    # LLM span, or vLLM's llm_request span; the detecting family is credited when no
    # token key says otherwise. An HTTP client span of an inference request is an attempt
    # of its parent LLM call (ingest/http_attempts.py).
    convention = plan.token_convention
    if convention is None:
        if name == conv.VLLM_SPAN_NAME:
            convention = conv.VLLM.name
        elif fields.get("llm_span_kind") == conv.OPENINFERENCE_LLM_KIND:
            convention = conv.OPENINFERENCE.name
        elif fields.get("operation_name") in conv.LLM_OPERATION_NAMES:
            convention = plan.operation_convention
        elif is_http_attempt(span.kind, fields, plan.reads_quota) and _has_parent(span):
            convention = HTTP_CONVENTION
        elif is_tool_span(fields):
            if resource.invalid is not None:
                return resource.invalid
            run_id = get_run_id(fields)
            return tool_span_row(span, span_values, fields, run_id, _shard_id(fields), latest_ns)
        else:
            return None

    if resource.invalid is not None:
        return resource.invalid
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
    for field, key in plan.span_tokens:
        count = check.token_count(span_values[key])
        if count is None:
            return check.token_reason(key)
        fields[field] = count
    for key in plan.span_shadowed_tokens:
        if check.token_count(span_values[key]) is None:
            return check.token_reason(key)
    if resource_reason is not None:
        return resource_reason
    wait_reason = check.check_queue_wait(fields.get("queue_wait_s"))
    if wait_reason is not None:
        return wait_reason
    run_id, shard_id = get_run_id(fields), _shard_id(fields)
    id_reason = check.check_id_lengths(
        run_id, shard_id, fields.get("sweep_id"), fields.get("call_id")
    )
    if nul_in_id:
        id_reason = check.REASON_ID_LENGTH
    elif shard_id == WHOLE_RUN:
        id_reason = check.REASON_WHOLE_RUN_SHARD
    if id_reason is not None:
        return id_reason

    get = fields.get
    call_id = get("call_id")
    own_parent = parent if parent and parent != _ZERO_SPAN_ID else None
    if not call_id and convention == HTTP_CONVENTION and own_parent is not None:
        # The requests of one LLM call: one logical call, named by the LLM span.
        call_id = own_parent.hex()
    ttft_s = get("ttft_s")
    if ttft_s is None and span.events:
        ttft_s = _first_chunk_ttft(span, start_ns)
    status, error_type, http_status = failure(
        span, get("error_type") or None, get("error_code") or None, get("http_status")
    )
    response_model = get("response_model")
    # Message content is left out of what is stored, after every field is read
    # (ingest/content_filter.py).
    content = content or ContentDrops()
    span_json = content.stored_json(span_values, span_json, plan.content_keys)
    if not content.keep:
        content.resource_attribute += resource.content_dropped
        if span.events:
            content.count_events(span.events)

    # Every column by name (storage/codecs/attempt_row.py puts them in COPY order).
    return attempt_row(
        identity=identity_part(
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=own_parent,
            run_id=run_id,
            shard_id=shard_id,
            declared_shard_count=get("declared_shard_count"),
            concurrency_cap=get("concurrency_cap"),
            sweep_id=get("sweep_id"),
            call_id=call_id or span_id.hex(),
            call_id_explicit=bool(call_id),
            resend_count=get("resend_count"),
        ),
        measures=measures_part(
            start_ns=start_ns,
            end_ns=end_ns,
            queue_wait_s=get("queue_wait_s"),
            ttft_s=ttft_s,
            prompt_tokens=get("prompt_tokens"),
            completion_tokens=get("completion_tokens"),
            reported_total_tokens=get("reported_total_tokens"),
            cache_read_tokens=get("cache_read_tokens"),
            cache_write_tokens=get("cache_write_tokens"),
            reasoning_tokens=get("reasoning_tokens"),
        ),
        description=description_part(
            # The request's model (docs/conventions.md#targets), else the response's.
            model=get("model") or get("invocation_model") or response_model,
            response_model=response_model,
            provider=get("provider"),
            operation_name=get("operation_name"),
            finish_reasons=get("finish_reasons"),
            status=status,
            error_type=error_type,
            http_status=http_status,
            convention=convention,
            span_name=name,
            span_kind=span.kind,
            span_attributes=span_json,
            resource_attributes=resource.encoded,
        ),
        quota=quota_values(span_values, resource.values) if plan.reads_quota else NO_QUOTA,
    )


def get_run_id(fields: dict[str, Any]) -> str:
    """``tpmledger.run.id`` / ``service.name`` (resolved by the plan), else "unassigned"."""
    return str(fields.get("run_id") or "unassigned")


def _shard_id(fields: dict[str, Any]) -> str:
    # tpmledger.shard.id / service.instance.id (resolved by the plan), else
    # host.name:process.pid, else host.name alone, else "unknown".
    shard = fields.get("shard_id")
    if shard:
        return str(shard)
    host = fields.get("host_name")
    if host:
        pid = fields.get("process_pid")
        return f"{host}:{pid}" if pid else str(host)
    return "unknown"


def _has_parent(span: Any) -> bool:
    # An HTTP request is an attempt of the span it ran under; a root request (LiteLLM's
    # callback reports its LLM span after the call, unlinked) is not an LLM call.
    parent = span.parent_span_id
    return bool(parent) and parent != _ZERO_SPAN_ID


def _first_chunk_ttft(span: Any, start_ns: int) -> float | None:
    # TTFT = earliest first-token event (OpenLLMetry chunk, OpenInference first token)
    # − span start.
    first = None
    for raw in span.events:
        try:
            event = Span.Event.FromString(raw)
        except DecodeError:
            continue
        if event.name in conv.TTFT_EVENTS and (first is None or event.time_unix_nano < first):
            first = event.time_unix_nano
    if first is None or first < start_ns:
        return None
    return (first - start_ns) / 1e9
