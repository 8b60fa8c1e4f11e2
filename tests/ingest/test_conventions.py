"""The convention registry reproduces docs/conventions.md exactly and credits the right family."""

from __future__ import annotations

import pytest

from tpmledger.ingest import conventions as conv
from tpmledger.ingest.span_plan import FIELD_READERS, plan_for

# docs/conventions.md, "read from, first present wins", transcribed by hand: the registry must
# derive
# exactly this order from its per-family lists.
SPEC_TABLE = {
    "run_id": ("tpmledger.run.id", "service.name"),
    "shard_id": ("tpmledger.shard.id", "service.instance.id"),
    "host_name": ("host.name",),
    "process_pid": ("process.pid",),
    "declared_shard_count": ("tpmledger.shard.count",),
    "concurrency_cap": ("tpmledger.concurrency.cap",),
    "sweep_id": ("tpmledger.sweep.id",),
    "call_id": ("tpmledger.call.id",),
    "resend_count": ("http.request.resend_count",),
    "queue_wait_s": ("tpmledger.queue.wait_s", "gen_ai.latency.time_in_queue"),
    "ttft_s": (
        "gen_ai.response.time_to_first_chunk",
        "gen_ai.latency.time_to_first_token",
        "gen_ai.server.time_to_first_token",
    ),
    "prompt_tokens": (
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.prompt_tokens",
        "llm.token_count.prompt",
    ),
    "completion_tokens": (
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.completion_tokens",
        "llm.token_count.completion",
    ),
    "reported_total_tokens": (
        "gen_ai.usage.total_tokens",
        "llm.usage.total_tokens",
        "llm.token_count.total",
    ),
    "cache_read_tokens": (
        "gen_ai.usage.cache_read.input_tokens",
        "gen_ai.usage.cache_read_input_tokens",
        "llm.token_count.prompt_details.cache_read",
    ),
    "cache_write_tokens": (
        "gen_ai.usage.cache_write.input_tokens",
        "gen_ai.usage.cache_creation.input_tokens",
        "gen_ai.usage.cache_creation_input_tokens",
        "llm.token_count.prompt_details.cache_write",
    ),
    "reasoning_tokens": (
        "gen_ai.usage.reasoning.output_tokens",
        "gen_ai.usage.reasoning_tokens",
        "llm.token_count.completion_details.reasoning",
    ),
    # The target's model is the request's (docs/conventions.md#targets): then
    # OpenInference's invocation parameters, then the response's model.
    "model": ("gen_ai.request.model",),
    "response_model": ("gen_ai.response.model", "llm.model_name"),
    "invocation_model": ("llm.invocation_parameters",),
    "provider": ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system"),
    "operation_name": ("gen_ai.operation.name",),
    "finish_reasons": ("gen_ai.response.finish_reasons",),
    "http_status": ("http.response.status_code", "http.status_code"),
    "http_method": ("http.request.method", "http.method"),
    "url": ("url.full", "http.url", "url.path", "http.target"),
    "error_type": ("error.type",),
    "error_code": ("error.code",),
    "llm_span_kind": ("openinference.span.kind",),
}


def test_field_order_is_the_spec_table() -> None:
    assert dict(conv.FIELD_KEYS) == SPEC_TABLE


def test_family_names_are_the_spec_convention_values() -> None:
    assert set(conv.FAMILY_NAMES) == {
        "semconv",
        "semconv-legacy",
        "openinference",
        "vllm",
        "openllmetry",
        "openlit",
        "tpmledger",
    }


def test_every_field_has_a_reader_and_token_keys_are_complete() -> None:
    assert set(FIELD_READERS) == set(conv.FIELD_KEYS)
    assert {k for f in conv.TOKEN_FIELDS for k in SPEC_TABLE[f]} == conv.TOKEN_KEYS


def test_generic_families_have_no_markers_and_dialects_do() -> None:
    generic = {f.name for f in conv.FAMILIES if not f.markers and not f.span_names}
    assert generic == {"semconv", "semconv-legacy"}


@pytest.mark.parametrize(
    ("key", "span_keys", "span_name", "family"),
    [
        ("gen_ai.usage.input_tokens", set(), "chat", "semconv"),
        ("gen_ai.usage.prompt_tokens", set(), "chat", "semconv-legacy"),
        ("gen_ai.usage.prompt_tokens", set(), "llm_request", "vllm"),
        ("gen_ai.usage.prompt_tokens", {"gen_ai.latency.time_in_queue"}, "x", "vllm"),
        ("gen_ai.usage.input_tokens", {"llm.request.type"}, "openai.chat", "openllmetry"),
        ("gen_ai.usage.input_tokens", {"gen_ai.is_streaming"}, "openai.chat", "openllmetry"),
        ("gen_ai.usage.input_tokens", {"gen_ai.server.time_to_first_token"}, "x", "openlit"),
        ("gen_ai.usage.input_tokens", {"tpmledger.call.id"}, "x", "tpmledger"),
        ("llm.token_count.prompt", set(), "ChatCompletion", "openinference"),
        # Only one family writes these keys: no marker needed.
        ("llm.usage.total_tokens", set(), "x", "openllmetry"),
        ("gen_ai.usage.cache_read_input_tokens", set(), "x", "openllmetry"),
        # Markers of a family that does not own the key do not matter.
        ("llm.token_count.prompt", {"tpmledger.call.id"}, "x", "openinference"),
        ("gen_ai.operation.name", set(), "chat", "semconv"),
        ("gen_ai.operation.name", {"tpmledger.call.id"}, "chat", "tpmledger"),
        ("gen_ai.operation.name", {"llm.request.type"}, "openai.chat", "openllmetry"),
    ],
)
def test_convention_for(key: str, span_keys: set[str], span_name: str, family: str) -> None:
    assert conv.convention_for(key, frozenset(span_keys), span_name) == family


def test_plan_prefers_span_keys_of_equal_rank_and_earlier_keys_across_sources() -> None:
    plan = plan_for(
        ("service.name", "tpmledger.run.id", "gen_ai.usage.input_tokens"),
        ("service.name", "gen_ai.usage.prompt_tokens"),
        False,
    )
    # tpmledger.run.id (resource) outranks service.name (span); input_tokens (resource)
    # outranks prompt_tokens (span), which is still validated as a shadowed token key.
    assert dict(plan.resource_fields) == {
        "run_id": "tpmledger.run.id",
        "prompt_tokens": "gen_ai.usage.input_tokens",
    }
    assert plan.span_tokens == ()
    assert plan.span_shadowed_tokens == ("gen_ai.usage.prompt_tokens",)
    same_key = plan_for(("service.name",), ("service.name",), False)
    assert [f for f, _, _ in same_key.span_fields] == ["run_id"]
    assert same_key.resource_fields == ()


def test_docs_list_every_key_family_and_marker() -> None:
    from pathlib import Path

    docs = (Path(__file__).parents[2] / "docs" / "conventions.md").read_text()
    names = {key for keys in conv.FIELD_KEYS.values() for key in keys}
    for family in conv.FAMILIES:
        names |= {family.name, *family.markers, *family.span_names, *family.ttft_events}
    missing = sorted(name for name in names if f"`{name}`" not in docs)
    assert not missing, f"docs/conventions.md does not mention {missing}"
