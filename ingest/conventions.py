"""The convention registry: which attribute keys each telemetry family writes (docs/conventions.md).

Each family lists its keys in one place, per normalized field, in the family's own
first-present-wins order. Everything else is derived from the registry:

- the global first-present-wins order of a field = the families in registry order, each
  family's keys in its own order, duplicates dropped (this reproduces the docs/conventions.md table;
  ``tests/ingest/test_conventions.py`` pins it);
- the ``convention`` of a span = the family that owns the key that supplied its tokens
  (or, for spans without tokens, the key that identified the span as an LLM call). A key
  several families share goes to the family whose *marker* (a span-level key or span name
  only that family writes) is present, else to the generic family that owns it.

:func:`plan_for` resolves all of that once per distinct attribute-key shape, so the hot
path only does dictionary look-ups.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

# Fields whose values are token counts (validated as integers in [0, 10^9]).
TOKEN_FIELDS: Final = (
    "prompt_tokens",
    "completion_tokens",
    "reported_total_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)

# LLM-call detection (docs/conventions.md).
OPERATION_NAME_KEY: Final = "gen_ai.operation.name"
LLM_OPERATION_NAMES: Final = frozenset({"chat", "text_completion", "generate_content"})
OPENINFERENCE_KIND_KEY: Final = "openinference.span.kind"
OPENINFERENCE_LLM_KIND: Final = "LLM"
OPENINFERENCE_INVOCATION_KEY: Final = "llm.invocation_parameters"
VLLM_SPAN_NAME: Final = "llm_request"
# OpenLLMetry records time to first token only as span events with this name (docs/conventions.md).
COMPLETION_CHUNK_EVENT: Final = "gen_ai.content.completion.chunk"
# OpenInference marks the first streamed token with this event (an extension of docs/conventions.md:
# without it, OpenInference streams would report no TTFT at all).
OPENINFERENCE_FIRST_TOKEN_EVENT: Final = "First Token Stream Event"


@dataclass(frozen=True, slots=True)
class ConventionFamily:
    """One telemetry family: its keys per field, and what identifies its spans."""

    name: str
    keys: dict[str, tuple[str, ...]]
    # Span-level keys (never resource keys: those describe the deployment, not the
    # emitter) that only this family writes. No markers = a generic family.
    markers: frozenset[str] = field(default_factory=frozenset)
    span_names: frozenset[str] = field(default_factory=frozenset)
    # Span events whose earliest time − span start is the TTFT when no attribute gives it.
    ttft_events: frozenset[str] = field(default_factory=frozenset)
    description: str = ""


# Current OpenTelemetry GenAI token keys; the tpmledger family writes the same ones.
_SEMCONV_TOKENS: Final = {
    "prompt_tokens": ("gen_ai.usage.input_tokens",),
    "completion_tokens": ("gen_ai.usage.output_tokens",),
    "cache_read_tokens": ("gen_ai.usage.cache_read.input_tokens",),
    "cache_write_tokens": (
        "gen_ai.usage.cache_write.input_tokens",
        "gen_ai.usage.cache_creation.input_tokens",
    ),
    "reasoning_tokens": ("gen_ai.usage.reasoning.output_tokens",),
}

TPMLEDGER = ConventionFamily(
    name="tpmledger",
    description="tpmledger's own keys (run, shard, sweep, call, queue) + current gen_ai tokens",
    keys={
        "run_id": ("tpmledger.run.id",),
        "shard_id": ("tpmledger.shard.id",),
        "declared_shard_count": ("tpmledger.shard.count",),
        "concurrency_cap": ("tpmledger.concurrency.cap",),
        "sweep_id": ("tpmledger.sweep.id",),
        "call_id": ("tpmledger.call.id",),
        "queue_wait_s": ("tpmledger.queue.wait_s",),
        **_SEMCONV_TOKENS,
        "operation_name": (OPERATION_NAME_KEY,),
    },
    markers=frozenset(
        {"tpmledger.call.id", "tpmledger.queue.wait_s", "tpmledger.run.id", "tpmledger.shard.id"}
    ),
)

SEMCONV = ConventionFamily(
    name="semconv",
    description="OpenTelemetry semantic conventions (GenAI, HTTP, resource), current keys",
    keys={
        "run_id": ("service.name",),
        "shard_id": ("service.instance.id",),
        "host_name": ("host.name",),
        "process_pid": ("process.pid",),
        "resend_count": ("http.request.resend_count",),
        "ttft_s": ("gen_ai.response.time_to_first_chunk",),
        **_SEMCONV_TOKENS,
        "model": ("gen_ai.request.model",),
        "response_model": ("gen_ai.response.model",),
        "provider": ("gen_ai.provider.name",),
        "operation_name": (OPERATION_NAME_KEY,),
        "finish_reasons": ("gen_ai.response.finish_reasons",),
        # HTTP semantic conventions, current and before 1.23 (HTTP client spans).
        "http_status": ("http.response.status_code", "http.status_code"),
        "http_method": ("http.request.method", "http.method"),
        "url": ("url.full", "http.url", "url.path", "http.target"),
        "error_type": ("error.type",),
        "error_code": ("error.code",),
    },
)

SEMCONV_LEGACY = ConventionFamily(
    name="semconv-legacy",
    description="deprecated GenAI keys (prompt_tokens, completion_tokens, gen_ai.system)",
    keys={
        "prompt_tokens": ("gen_ai.usage.prompt_tokens",),
        "completion_tokens": ("gen_ai.usage.completion_tokens",),
        "provider": ("gen_ai.system",),
    },
)

VLLM = ConventionFamily(
    name="vllm",
    description="vLLM --otlp-traces-endpoint: `llm_request` spans, deprecated token keys",
    keys={
        "queue_wait_s": ("gen_ai.latency.time_in_queue",),
        "ttft_s": ("gen_ai.latency.time_to_first_token",),
        "prompt_tokens": ("gen_ai.usage.prompt_tokens",),
        "completion_tokens": ("gen_ai.usage.completion_tokens",),
        "response_model": ("gen_ai.response.model",),
        "finish_reasons": ("gen_ai.response.finish_reasons",),
    },
    markers=frozenset(
        {
            "gen_ai.latency.time_in_queue",
            "gen_ai.latency.time_to_first_token",
            "gen_ai.latency.e2e",
            "gen_ai.latency.time_in_scheduler",
            "gen_ai.latency.time_in_model_forward",
            "gen_ai.latency.time_in_model_execute",
        }
    ),
    span_names=frozenset({VLLM_SPAN_NAME}),
)

OPENLLMETRY = ConventionFamily(
    name="openllmetry",
    description="OpenLLMetry / Traceloop instrumentations (TTFT only as chunk events)",
    keys={
        "prompt_tokens": ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"),
        "completion_tokens": ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens"),
        "reported_total_tokens": ("gen_ai.usage.total_tokens", "llm.usage.total_tokens"),
        "cache_read_tokens": (
            "gen_ai.usage.cache_read.input_tokens",
            "gen_ai.usage.cache_read_input_tokens",
        ),
        "cache_write_tokens": (
            "gen_ai.usage.cache_creation.input_tokens",
            "gen_ai.usage.cache_creation_input_tokens",
        ),
        "reasoning_tokens": ("gen_ai.usage.reasoning_tokens",),
        "model": ("gen_ai.request.model",),
        "response_model": ("gen_ai.response.model",),
        "provider": ("gen_ai.provider.name", "gen_ai.system"),
        "operation_name": (OPERATION_NAME_KEY,),
        "finish_reasons": ("gen_ai.response.finish_reasons",),
        "error_type": ("error.type",),
    },
    markers=frozenset(
        {
            "llm.request.type",
            "llm.usage.total_tokens",
            "llm.is_streaming",
            "gen_ai.is_streaming",
            "gen_ai.openai.api_base",
            "gen_ai.openai.api_version",
            "gen_ai.usage.cache_read_input_tokens",
            "gen_ai.usage.cache_creation_input_tokens",
            "traceloop.span.kind",
            "traceloop.workflow.name",
            "traceloop.entity.name",
        }
    ),
    ttft_events=frozenset({COMPLETION_CHUNK_EVENT}),
)

OPENLIT = ConventionFamily(
    name="openlit",
    description="OpenLIT instrumentations (TTFT as gen_ai.server.time_to_first_token)",
    keys={
        "ttft_s": ("gen_ai.server.time_to_first_token",),
        "prompt_tokens": ("gen_ai.usage.input_tokens",),
        "completion_tokens": ("gen_ai.usage.output_tokens",),
        "reported_total_tokens": ("gen_ai.usage.total_tokens",),
        "reasoning_tokens": ("gen_ai.usage.reasoning_tokens",),
        "model": ("gen_ai.request.model",),
        "response_model": ("gen_ai.response.model",),
        "provider": ("gen_ai.system",),
        "operation_name": (OPERATION_NAME_KEY,),
        "finish_reasons": ("gen_ai.response.finish_reasons",),
        "error_type": ("error.type",),
    },
    markers=frozenset(
        {
            "gen_ai.server.time_to_first_token",
            "gen_ai.server.time_per_output_token",
            "gen_ai.usage.cost",
            "gen_ai.sdk.version",
            "gen_ai.request.is_stream",
            "gen_ai.application_name",
            "gen_ai.environment",
        }
    ),
)

OPENINFERENCE = ConventionFamily(
    name="openinference",
    description="Arize OpenInference instrumentations (llm.token_count.*)",
    keys={
        "prompt_tokens": ("llm.token_count.prompt",),
        "completion_tokens": ("llm.token_count.completion",),
        "reported_total_tokens": ("llm.token_count.total",),
        "cache_read_tokens": ("llm.token_count.prompt_details.cache_read",),
        "cache_write_tokens": ("llm.token_count.prompt_details.cache_write",),
        "reasoning_tokens": ("llm.token_count.completion_details.reasoning",),
        # The request's model is in the invocation parameters (a JSON object's "model");
        # llm.model_name is the model the response named.
        "invocation_model": (OPENINFERENCE_INVOCATION_KEY,),
        "response_model": ("llm.model_name",),
        "provider": ("llm.provider", "llm.system"),
        "llm_span_kind": (OPENINFERENCE_KIND_KEY,),
    },
    markers=frozenset(
        {OPENINFERENCE_KIND_KEY, "llm.model_name", "llm.provider", OPENINFERENCE_INVOCATION_KEY}
    ),
    ttft_events=frozenset({OPENINFERENCE_FIRST_TOKEN_EVENT}),
)

# Registry order = first-present-wins order across families (docs/conventions.md).
FAMILIES: Final = (TPMLEDGER, SEMCONV, SEMCONV_LEGACY, VLLM, OPENLLMETRY, OPENLIT, OPENINFERENCE)
FAMILY_NAMES: Final = tuple(family.name for family in FAMILIES)
TTFT_EVENTS: Final = frozenset(name for family in FAMILIES for name in family.ttft_events)
# When a shared key's owners have markers present, the most specific family wins.
_MARKED_PREFERENCE: Final = (VLLM, OPENINFERENCE, OPENLIT, OPENLLMETRY, TPMLEDGER)


def _field_keys() -> dict[str, tuple[str, ...]]:
    order: dict[str, list[str]] = {}
    for family in FAMILIES:
        for name, keys in family.keys.items():
            bucket = order.setdefault(name, [])
            bucket.extend(key for key in keys if key not in bucket)
    return {name: tuple(keys) for name, keys in order.items()}


#: field → its keys, first present wins.
FIELD_KEYS: Final = MappingProxyType(_field_keys())
#: key → (field, rank within the field).
KEY_FIELD: Final = MappingProxyType(
    {key: (name, rank) for name, keys in FIELD_KEYS.items() for rank, key in enumerate(keys)}
)
TOKEN_KEYS: Final = frozenset(key for name in TOKEN_FIELDS for key in FIELD_KEYS[name])
#: key → owning families, in registry order.
KEY_OWNERS: Final = MappingProxyType(
    {
        key: tuple(f for f in FAMILIES if any(key in ks for ks in f.keys.values()))
        for key in KEY_FIELD
    }
)


def convention_for(key: str, span_keys: frozenset[str] | set[str], span_name: str) -> str:
    """The family credited for ``key`` on a span with these span-level keys and name."""
    owners = KEY_OWNERS.get(key, ())
    if len(owners) == 1:
        return owners[0].name
    for family in _MARKED_PREFERENCE:
        if family in owners and (span_name in family.span_names or family.markers & span_keys):
            return family.name
    for family in owners:
        if not family.markers:
            return family.name
    return owners[0].name if owners else SEMCONV.name
