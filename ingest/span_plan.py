"""Key resolution plans: which attribute supplies which field, resolved once per key shape.

Spans of one emitter carry the same attribute *keys* over and over, with different
values. Everything the registry (:mod:`ingest.conventions`) decides from keys alone —
the winning key of each field (first present wins; a span key replaces a resource key
of the same name), which token keys need validating, which family gets the
``convention`` credit — is computed once per (resource keys, span keys) shape by
:func:`plan_for` and cached. Fields that come from the resource are read and typed once
per resource (:meth:`ResourceContext.typed_fields`), not once per span.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from tpmledger.ingest import conventions as conv
from tpmledger.ingest.attribute_values import as_int, as_seconds, as_string_list, as_text
from tpmledger.ingest.content_filter import content_keys_of
from tpmledger.ingest.quota_headers import reads_quota
from tpmledger.ingest.span_validation import token_count, token_reason

_INT32_MAX: Final = 2**31 - 1


def _positive_int(value: Any) -> int | None:
    return as_int(value, 1, _INT32_MAX)


def _count(value: Any) -> int | None:
    return as_int(value, 0, _INT32_MAX)


def _http_status(value: Any) -> int | None:
    return as_int(value, 100, 599)


def _invocation_model(value: Any) -> str | None:
    # OpenInference's llm.invocation_parameters: a JSON object as a string; its "model".
    if type(value) is not str or '"model"' not in value:
        return None
    try:
        parameters = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    model = parameters.get("model") if type(parameters) is dict else None
    return model if type(model) is str and model else None


#: field → reader turning an attribute value into the column's type (None = unreadable).
FIELD_READERS: Final[dict[str, Callable[[Any], Any]]] = {
    "run_id": as_text,
    "shard_id": as_text,
    "host_name": as_text,
    "process_pid": as_text,
    "declared_shard_count": _positive_int,
    "concurrency_cap": _positive_int,
    "sweep_id": as_text,
    "call_id": as_text,
    "resend_count": _count,
    "queue_wait_s": as_seconds,
    "ttft_s": as_seconds,
    **dict.fromkeys(conv.TOKEN_FIELDS, token_count),
    "model": as_text,
    "response_model": as_text,
    "invocation_model": _invocation_model,
    "provider": as_text,
    "operation_name": as_text,
    "finish_reasons": as_string_list,
    "http_status": _http_status,
    "error_type": as_text,
    "error_code": as_text,
    "http_method": as_text,
    "url": as_text,
    "llm_span_kind": as_text,
}
assert set(FIELD_READERS) == set(conv.FIELD_KEYS), "every registry field needs a reader"


# eq=False: plans are unique per shape (cached), so identity hashing is exact and cheap.
@dataclass(frozen=True, slots=True, eq=False)
class SpanPlan:
    """Key resolution for one (resource keys, span keys) shape."""

    # (field, key, reader) of the winning key of every non-token field read from the span.
    span_fields: tuple[tuple[str, str, Callable[[Any], Any]], ...]
    # (field, key) of the winning token key of every token field read from the span.
    span_tokens: tuple[tuple[str, str], ...]
    # Span token keys that lost to another key of their field: validated, not stored.
    span_shadowed_tokens: tuple[str, ...]
    # (field, key) of every field read from the resource (typed once per resource).
    resource_fields: tuple[tuple[str, str], ...]
    # Token keys of the resource that lost to another key: validated, not stored.
    resource_shadowed_tokens: tuple[str, ...]
    # Family that supplied the tokens; None when the span carries no token key.
    token_convention: str | None
    # Family credited when gen_ai.operation.name identifies the span as an LLM call.
    operation_convention: str
    # Some key of the provider's rate-limit state is present (ingest/quota_headers.py).
    reads_quota: bool = False
    # Span keys that carry message content: left out of the stored attributes
    # (ingest/content_filter.py).
    content_keys: frozenset[str] = frozenset()


#: What the plan cache may hold, in bytes: its keys are tuples of attribute keys, which a
#: sender chooses (issue 41: every cache in the ingest path is bounded in bytes).
DEFAULT_PLAN_CACHE_BYTES: Final = 4 * 1024 * 1024
_PLAN_BYTES: Final = 2_048  # a plan and its dict slot, an upper estimate
_MAX_CACHED_SHAPE: Final = 64 * 1024  # a shape taking more is planned every time


class _PlanCache:
    """(resource keys, span keys, vllm_named) → plan, bounded in bytes: the key tuples
    and their strings, plus the plans; cleared whole when full (the common shapes are back
    after one span each)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.plans: dict[tuple[tuple[str, ...], tuple[str, ...], bool], SpanPlan] = {}

    def get(
        self, resource_keys: tuple[str, ...], span_keys: tuple[str, ...], vllm_named: bool
    ) -> SpanPlan:
        shape = (resource_keys, span_keys, vllm_named)
        plan = self.plans.get(shape)
        if plan is not None:
            return plan
        plan = _make_plan(resource_keys, span_keys, vllm_named)
        charge = _PLAN_BYTES + sum(
            sys.getsizeof(keys) + sum(map(sys.getsizeof, keys))
            for keys in (resource_keys, span_keys)
        )
        if charge > _MAX_CACHED_SHAPE:
            return plan
        if self.bytes + charge > self.max_bytes:
            self.plans.clear()
            self.bytes = 0
        self.plans[shape] = plan
        self.bytes += charge
        return plan


PLAN_CACHE: Final = _PlanCache(DEFAULT_PLAN_CACHE_BYTES)


def plan_for(
    resource_keys: tuple[str, ...], span_keys: tuple[str, ...], vllm_named: bool
) -> SpanPlan:
    """The plan for spans with these keys (``vllm_named``: the span is ``llm_request``),
    from :data:`PLAN_CACHE`."""
    return PLAN_CACHE.get(resource_keys, span_keys, vllm_named)


def _make_plan(
    resource_keys: tuple[str, ...], span_keys: tuple[str, ...], vllm_named: bool
) -> SpanPlan:
    """The plan for spans with these keys (``vllm_named``: the span is ``llm_request``)."""
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
    winners = {key for _, key, _ in best.values()}
    span_key_set = frozenset(span_keys)
    name = conv.VLLM_SPAN_NAME if vllm_named else ""
    token_convention = next(
        (
            conv.convention_for(best[field][1], span_key_set, name)
            for field in conv.TOKEN_FIELDS
            if field in best
        ),
        None,
    )
    return SpanPlan(
        span_fields=tuple(
            (field, key, FIELD_READERS[field])
            for field, (_, key, from_span) in best.items()
            if from_span and field not in conv.TOKEN_FIELDS
        ),
        span_tokens=tuple(
            (field, key)
            for field, (_, key, from_span) in best.items()
            if from_span and field in conv.TOKEN_FIELDS
        ),
        span_shadowed_tokens=tuple(k for k, s in tokens.items() if s and k not in winners),
        resource_fields=tuple(
            (field, key) for field, (_, key, from_span) in best.items() if not from_span
        ),
        resource_shadowed_tokens=tuple(k for k, s in tokens.items() if not s and k not in winners),
        token_convention=token_convention,
        operation_convention=conv.convention_for(conv.OPERATION_NAME_KEY, span_key_set, name),
        reads_quota=reads_quota(span_keys) or reads_quota(resource_keys),
        content_keys=content_keys_of(span_keys),
    )


class ResourceContext:
    """One resource's attributes, their JSON, and its typed fields per plan."""

    __slots__ = ("_typed", "content_dropped", "encoded", "invalid", "keys", "values")

    def __init__(self, values: dict[str, Any], encoded: str, invalid: str | None = None) -> None:
        self.values = values
        self.keys = tuple(values)
        self.encoded = encoded
        # Why the resource's attributes could not be read (its LLM spans are rejected).
        self.invalid = invalid
        # Content attributes left out of ``encoded`` (ingest/content_filter.py).
        self.content_dropped = 0
        self._typed: dict[SpanPlan, tuple[dict[str, Any], str | None]] = {}

    def typed_fields(self, plan: SpanPlan) -> tuple[dict[str, Any], str | None]:
        """Typed values of the fields ``plan`` reads from this resource, and the
        rejection reason when one of its token counts is invalid (else ``None``)."""
        cached = self._typed.get(plan)
        if cached is None:
            cached = self._type_fields(plan)
            self._typed[plan] = cached
        return cached

    def _type_fields(self, plan: SpanPlan) -> tuple[dict[str, Any], str | None]:
        typed: dict[str, Any] = {}
        reason = None
        for field, key in plan.resource_fields:
            value = FIELD_READERS[field](self.values[key])
            if field in conv.TOKEN_FIELDS and value is None:
                reason = reason or token_reason(key)
            typed[field] = value
        for key in plan.resource_shadowed_tokens:
            if token_count(self.values[key]) is None:
                reason = reason or token_reason(key)
        return typed, reason
