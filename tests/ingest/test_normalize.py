"""normalize_request: every docs/conventions.md key of every family, fallbacks, outcome,
detection."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tests.ingest.span_builders import (
    BASE_NS,
    LLM,
    NOW_NS,
    as_columns,
    normalize,
    normalize_one,
    request,
    span,
)
from tpmledger.ingest import conventions as conv
from tpmledger.ingest.normalize import normalize_payload
from tpmledger.storage.server.database import raw_transaction
from tpmledger.storage.writers.bulk_writer import write_attempts

# (key, attribute value, column, stored value): every key of the docs/conventions.md table.
KEY_CASES: list[tuple[str, Any, str, Any]] = [
    ("tpmledger.run.id", "run-7", "run_id", "run-7"),
    ("service.name", "svc", "run_id", "svc"),
    ("tpmledger.shard.id", "3", "shard_id", "3"),
    ("tpmledger.shard.id", 3, "shard_id", "3"),
    ("service.instance.id", "pod-a", "shard_id", "pod-a"),
    ("tpmledger.shard.count", "8", "declared_shard_count", 8),
    ("tpmledger.shard.count", 8, "declared_shard_count", 8),
    ("tpmledger.concurrency.cap", "16", "concurrency_cap", 16),
    ("tpmledger.sweep.id", "sweep-1", "sweep_id", "sweep-1"),
    ("tpmledger.call.id", "call-9", "call_id", "call-9"),
    ("http.request.resend_count", 2, "resend_count", 2),
    ("tpmledger.queue.wait_s", 0.5, "queue_wait_s", 0.5),
    ("gen_ai.latency.time_in_queue", 0.25, "queue_wait_s", 0.25),
    ("gen_ai.response.time_to_first_chunk", 0.125, "ttft_s", 0.125),
    ("gen_ai.latency.time_to_first_token", 0.5, "ttft_s", 0.5),
    ("gen_ai.server.time_to_first_token", 1.5, "ttft_s", 1.5),
    ("gen_ai.usage.input_tokens", 11, "prompt_tokens", 11),
    ("gen_ai.usage.prompt_tokens", 12, "prompt_tokens", 12),
    ("llm.token_count.prompt", 13, "prompt_tokens", 13),
    ("gen_ai.usage.output_tokens", 21, "completion_tokens", 21),
    ("gen_ai.usage.completion_tokens", 22, "completion_tokens", 22),
    ("llm.token_count.completion", 23, "completion_tokens", 23),
    ("gen_ai.usage.total_tokens", 31, "reported_total_tokens", 31),
    ("llm.usage.total_tokens", 32, "reported_total_tokens", 32),
    ("llm.token_count.total", 33, "reported_total_tokens", 33),
    ("gen_ai.usage.cache_read.input_tokens", 41, "cache_read_tokens", 41),
    ("gen_ai.usage.cache_read_input_tokens", 42, "cache_read_tokens", 42),
    ("llm.token_count.prompt_details.cache_read", 43, "cache_read_tokens", 43),
    ("gen_ai.usage.cache_write.input_tokens", 51, "cache_write_tokens", 51),
    ("gen_ai.usage.cache_creation.input_tokens", 52, "cache_write_tokens", 52),
    ("gen_ai.usage.cache_creation_input_tokens", 53, "cache_write_tokens", 53),
    ("llm.token_count.prompt_details.cache_write", 54, "cache_write_tokens", 54),
    ("gen_ai.usage.reasoning.output_tokens", 61, "reasoning_tokens", 61),
    ("gen_ai.usage.reasoning_tokens", 62, "reasoning_tokens", 62),
    ("llm.token_count.completion_details.reasoning", 63, "reasoning_tokens", 63),
    ("gen_ai.response.model", "m-resp", "model", "m-resp"),
    ("gen_ai.request.model", "m-req", "model", "m-req"),
    ("llm.model_name", "m-oi", "model", "m-oi"),
    ("gen_ai.provider.name", "openai", "provider", "openai"),
    ("gen_ai.system", "vllm", "provider", "vllm"),
    ("llm.provider", "azure", "provider", "azure"),
    ("gen_ai.response.finish_reasons", ["stop", "length"], "finish_reasons", ["stop", "length"]),
    ("gen_ai.response.finish_reasons", '["stop"]', "finish_reasons", ["stop"]),
    ("gen_ai.response.finish_reasons", "stop", "finish_reasons", ["stop"]),
    ("http.response.status_code", 200, "http_status", 200),
    ("tpmledger.shard.count", "many", "declared_shard_count", None),
    ("http.request.resend_count", -1, "resend_count", None),
    ("gen_ai.response.time_to_first_chunk", -0.1, "ttft_s", None),
    ("gen_ai.response.time_to_first_chunk", "0.75", "ttft_s", 0.75),
]


@pytest.mark.parametrize(("key", "value", "column", "expected"), KEY_CASES)
@pytest.mark.parametrize("where", ["span", "resource"])
def test_every_key_is_read_from_span_or_resource(
    key: str, value: Any, column: str, expected: Any, where: str
) -> None:
    attributes = {key: value} if where == "span" else {}
    resource = {key: value} if where == "resource" else {}
    row = normalize_one({**LLM, **attributes}, resource=resource)
    assert row[column] == expected


def _distinct_value(field: str, index: int) -> Any:
    if field in conv.TOKEN_FIELDS:
        return 100 + index
    if field in ("queue_wait_s", "ttft_s"):
        return 0.5 + index
    return f"v{index}"


_FIELD_COLUMN = {
    name: name for name in ("run_id", "shard_id", "queue_wait_s", "ttft_s", "model", "provider")
}
_FIELD_COLUMN.update({name: name for name in conv.TOKEN_FIELDS})
ORDER_CASES = [
    (field, start)
    for field, keys in conv.FIELD_KEYS.items()
    if len(keys) > 1 and field in _FIELD_COLUMN
    for start in range(len(keys))
]


@pytest.mark.parametrize(("field", "start"), ORDER_CASES)
def test_first_present_key_wins(field: str, start: int) -> None:
    keys = conv.FIELD_KEYS[field]
    attributes = {key: _distinct_value(field, i) for i, key in enumerate(keys) if i >= start}
    row = normalize_one({**LLM, **attributes})
    assert row[_FIELD_COLUMN[field]] == _distinct_value(field, start)


def test_span_attributes_override_resource_attributes_of_the_same_key() -> None:
    row = normalize_one(
        {**LLM, "tpmledger.run.id": "from-span", "gen_ai.usage.input_tokens": 5},
        resource={"tpmledger.run.id": "from-resource", "gen_ai.usage.input_tokens": 7},
    )
    assert (row["run_id"], row["prompt_tokens"]) == ("from-span", 5)
    assert json.loads(row["resource_attributes"])["tpmledger.run.id"] == "from-resource"


@pytest.mark.parametrize(
    ("resource", "run_id", "shard_id"),
    [
        ({}, "unassigned", "unknown"),
        ({"service.name": "svc", "host.name": "node-1", "process.pid": 42}, "svc", "node-1:42"),
        ({"host.name": "node-1"}, "unassigned", "node-1"),
        ({"service.instance.id": "i-1", "host.name": "node-1"}, "unassigned", "i-1"),
        ({"tpmledger.run.id": "r", "service.name": "svc"}, "r", "unknown"),
    ],
)
def test_run_and_shard_fallbacks(resource: dict[str, Any], run_id: str, shard_id: str) -> None:
    row = normalize_one(LLM, resource=resource)
    assert (row["run_id"], row["shard_id"]) == (run_id, shard_id)


def test_absent_values_are_none_and_call_id_falls_back_to_span_id() -> None:
    span_id = bytes.fromhex("00f067aa0ba902b7")
    row = normalize_one(LLM, span_id=span_id)
    assert row["call_id"] == "00f067aa0ba902b7"
    assert row["call_id_explicit"] is False
    for column in (
        "resend_count",
        "queue_wait_s",
        "ttft_s",
        "declared_shard_count",
        *conv.TOKEN_FIELDS,
        "model",
        "finish_reasons",
        "http_status",
    ):
        assert row[column] is None, column
    explicit = normalize_one({**LLM, "tpmledger.call.id": "c-1"})
    assert (explicit["call_id"], explicit["call_id_explicit"]) == ("c-1", True)


@pytest.mark.parametrize(
    ("attributes", "status_code", "status", "error_type"),
    [
        ({}, Status.STATUS_CODE_UNSET, "ok", None),
        ({}, Status.STATUS_CODE_OK, "ok", None),
        ({"http.response.status_code": 200}, Status.STATUS_CODE_UNSET, "ok", None),
        ({}, Status.STATUS_CODE_ERROR, "error", "error"),
        ({"error.type": "timeout"}, Status.STATUS_CODE_UNSET, "error", "timeout"),
        ({"http.response.status_code": 429}, Status.STATUS_CODE_UNSET, "error", "http_429"),
        ({"http.response.status_code": 500}, Status.STATUS_CODE_ERROR, "error", "http_500"),
        (
            {"http.response.status_code": 503, "error.type": "overloaded"},
            Status.STATUS_CODE_ERROR,
            "error",
            "overloaded",
        ),
        ({"http.response.status_code": 200}, Status.STATUS_CODE_ERROR, "error", "error"),
    ],
)
def test_outcome_rules(
    attributes: dict[str, Any], status_code: int, status: str, error_type: str | None
) -> None:
    row = normalize_one({**LLM, **attributes}, status_code=status_code)
    assert (row["status"], row["error_type"]) == (status, error_type)


@pytest.mark.parametrize(
    ("attributes", "name", "convention"),
    [
        ({"gen_ai.usage.input_tokens": 1}, "anything", "semconv"),
        ({"gen_ai.operation.name": "chat"}, "chat m", "semconv"),
        ({"gen_ai.operation.name": "text_completion"}, "t", "semconv"),
        ({"gen_ai.operation.name": "generate_content"}, "g", "semconv"),
        ({"openinference.span.kind": "LLM"}, "ChatCompletion", "openinference"),
        ({}, "llm_request", "vllm"),
        ({"gen_ai.operation.name": "chat", "tpmledger.call.id": "c"}, "chat", "tpmledger"),
    ],
)
def test_llm_call_detection(attributes: dict[str, Any], name: str, convention: str) -> None:
    assert normalize_one(attributes, name=name)["convention"] == convention


@pytest.mark.parametrize(
    "attributes",
    [
        {},
        {"http.request.method": "POST", "http.response.status_code": 200},
        {"gen_ai.operation.name": "embeddings"},
        {"openinference.span.kind": "CHAIN"},
        {"gen_ai.request.model": "m"},
    ],
)
def test_other_spans_are_ignored(attributes: dict[str, Any]) -> None:
    batch = normalize(span(attributes, name="POST /v1/chat"))
    assert (batch.rows, batch.ignored, batch.rejected) == ([], 1, 0)


@pytest.mark.parametrize(
    ("attributes", "convention"),
    [
        ({"gen_ai.usage.input_tokens": 1, "gen_ai.usage.output_tokens": 2}, "semconv"),
        ({"gen_ai.usage.prompt_tokens": 1, "gen_ai.usage.completion_tokens": 2}, "semconv-legacy"),
        ({"llm.token_count.prompt": 1, "llm.token_count.completion": 2}, "openinference"),
        (
            {
                "gen_ai.usage.input_tokens": 1,
                "gen_ai.usage.total_tokens": 3,
                "llm.request.type": "chat",
            },
            "openllmetry",
        ),
        (
            {"gen_ai.usage.input_tokens": 1, "gen_ai.server.time_to_first_token": 0.2},
            "openlit",
        ),
        ({"gen_ai.usage.input_tokens": 1, "tpmledger.call.id": "c"}, "tpmledger"),
        ({"gen_ai.usage.prompt_tokens": 1, "gen_ai.latency.time_in_queue": 0.1}, "vllm"),
    ],
)
def test_convention_names_the_family_that_supplied_the_tokens(
    attributes: dict[str, Any], convention: str
) -> None:
    assert normalize_one(attributes)["convention"] == convention


def test_vllm_llm_request_span() -> None:
    # Shaped like vLLM's tracing (vllm/tracing.py): deprecated usage keys, latency keys,
    # finish reasons as a JSON string, SERVER kind, no gen_ai.operation.name.
    attributes = {
        "gen_ai.response.model": "meta-llama/Llama-3.1-8B-Instruct",
        "gen_ai.request.id": "chatcmpl-1",
        "gen_ai.request.temperature": 0.7,
        "gen_ai.request.top_p": 1.0,
        "gen_ai.request.max_tokens": 256,
        "gen_ai.request.n": 1,
        "gen_ai.usage.num_sequences": 1,
        "gen_ai.usage.prompt_tokens": 812,
        "gen_ai.usage.completion_tokens": 256,
        "gen_ai.latency.time_in_queue": 0.004,
        "gen_ai.latency.time_to_first_token": 0.182,
        "gen_ai.latency.e2e": 2.4,
        "gen_ai.latency.time_in_scheduler": 0.01,
        "gen_ai.response.finish_reasons": '["length"]',
    }
    row = normalize_one(
        attributes,
        name="llm_request",
        kind=Span.SPAN_KIND_SERVER,
        resource={"service.name": "vllm", "host.name": "gpu-3", "process.pid": 77},
    )
    assert row["convention"] == "vllm"
    assert (row["prompt_tokens"], row["completion_tokens"]) == (812, 256)
    assert (row["ttft_s"], row["queue_wait_s"]) == (0.182, 0.004)
    assert row["finish_reasons"] == ["length"]
    assert row["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert (row["run_id"], row["shard_id"], row["span_kind"]) == ("vllm", "gpu-3:77", 2)
    assert row["status"] == "ok"


def test_openllmetry_span_ttft_from_first_chunk_event() -> None:
    start = BASE_NS
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "llm.request.type": "chat",
        "gen_ai.is_streaming": True,
        "gen_ai.usage.input_tokens": 20,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.total_tokens": 27,
    }
    events = [
        ("gen_ai.content.completion.chunk", start + 400_000_000),
        ("gen_ai.content.completion.chunk", start + 250_000_000),
        ("other", start + 1),
    ]
    row = normalize_one(attributes, name="openai.chat", start_ns=start, events=events)
    assert row["convention"] == "openllmetry"
    assert row["ttft_s"] == pytest.approx(0.25)
    assert (row["prompt_tokens"], row["completion_tokens"], row["reported_total_tokens"]) == (
        20,
        7,
        27,
    )
    # An attribute TTFT wins over events; events before the start are not a TTFT.
    with_attr = normalize_one(
        {**attributes, "gen_ai.response.time_to_first_chunk": 0.1}, events=events
    )
    assert with_attr["ttft_s"] == 0.1
    early = normalize_one(attributes, start_ns=start, events=[(conv.COMPLETION_CHUNK_EVENT, 5)])
    assert early["ttft_s"] is None


def test_openinference_first_token_event_is_a_ttft() -> None:
    attributes = {"openinference.span.kind": "LLM", "llm.token_count.prompt": 3}
    events = [(conv.OPENINFERENCE_FIRST_TOKEN_EVENT, BASE_NS + 90_000_000)]
    assert normalize_one(attributes, events=events)["ttft_s"] == pytest.approx(0.09)
    assert normalize_one(attributes, events=[("exception", BASE_NS + 1)])["ttft_s"] is None


def test_openlit_span() -> None:
    row = normalize_one(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.usage.input_tokens": 30,
            "gen_ai.usage.output_tokens": 12,
            "gen_ai.usage.total_tokens": 42,
            "gen_ai.usage.cost": 0.0001,
            "gen_ai.server.time_to_first_token": 0.31,
            "gen_ai.sdk.version": "1.35.0",
        },
        name="chat gpt-4o",
    )
    assert row["convention"] == "openlit"
    assert (row["ttft_s"], row["reported_total_tokens"], row["provider"]) == (0.31, 42, "openai")


def test_openinference_span() -> None:
    row = normalize_one(
        {
            "openinference.span.kind": "LLM",
            "llm.model_name": "gpt-4o-mini",
            "llm.provider": "openai",
            "llm.system": "openai",
            "llm.token_count.prompt": 15,
            "llm.token_count.completion": 9,
            "llm.token_count.total": 24,
            "llm.token_count.prompt_details.cache_read": 4,
            "llm.token_count.completion_details.reasoning": 2,
        },
        name="ChatCompletion",
    )
    assert row["convention"] == "openinference"
    assert (row["prompt_tokens"], row["completion_tokens"], row["reported_total_tokens"]) == (
        15,
        9,
        24,
    )
    assert (row["cache_read_tokens"], row["reasoning_tokens"]) == (4, 2)
    assert (row["model"], row["provider"]) == ("gpt-4o-mini", "openai")


def test_ids_times_kind_name_and_parent() -> None:
    trace_id, span_id, parent = bytes(range(1, 17)), bytes(range(1, 9)), bytes(range(9, 17))
    row = normalize_one(
        LLM,
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name="chat x",
        start_ns=BASE_NS,
        end_ns=BASE_NS + 7,
        kind=Span.SPAN_KIND_INTERNAL,
    )
    assert (row["trace_id"], row["span_id"], row["parent_span_id"]) == (trace_id, span_id, parent)
    assert (row["start_ns"], row["end_ns"], row["span_kind"]) == (BASE_NS, BASE_NS + 7, 1)
    assert row["span_name"] == "chat x"
    assert normalize_one(LLM)["parent_span_id"] is None
    assert normalize_one(LLM, parent_span_id=bytes(8))["parent_span_id"] is None


def test_attributes_are_stored_as_compact_json_of_plain_values() -> None:
    attributes = {
        **LLM,
        "s": "x",
        "i": 7,
        "d": 0.5,
        "b": True,
        "nan": math.nan,
        "inf": -math.inf,
        "raw": b"\x00\x01",
        "list": [1, "a"],
        "map": {"k": [True]},
    }
    row = normalize_one(attributes, resource={"service.name": "svc", "process.pid": 1})
    assert " " not in row["span_attributes"]
    assert json.loads(row["span_attributes"]) == {
        **LLM,
        "s": "x",
        "i": 7,
        "d": 0.5,
        "b": True,
        "nan": "NaN",
        "inf": "-Infinity",
        "raw": "AAE=",
        "list": [1, "a"],
        "map": {"k": [True]},
    }
    assert json.loads(row["resource_attributes"]) == {"service.name": "svc", "process.pid": 1}


def test_nul_characters_are_removed() -> None:
    row = normalize_one({**LLM, "gen_ai.request.model": "m\x00x", "k\x00": "v"}, name="a\x00b")
    assert row["model"] == "mx"
    assert row["span_name"] == "ab"
    assert json.loads(row["span_attributes"])["k"] == "v"
    assert "\\u0000" not in row["span_attributes"]


def test_several_resources_and_scopes_and_payload_entry_point() -> None:
    first = request(span({**LLM, "gen_ai.usage.input_tokens": 1}), resource={"service.name": "a"})
    second = request(span(LLM), span({"x": 1}), resource={"service.name": "b"})
    first.resource_spans.extend(second.resource_spans)
    first.resource_spans[0].scope_spans.add().spans.append(span(LLM))
    batch = normalize_payload(first.SerializeToString(), now_ns=NOW_NS)
    assert [as_columns(r)["run_id"] for r in batch.rows] == ["a", "a", "b"]
    assert (batch.ignored, batch.rejected) == (1, 0)


def test_rows_fit_the_attempts_table(database_url: str) -> None:
    batch = normalize(
        span({**LLM, "gen_ai.usage.input_tokens": 3, "gen_ai.response.finish_reasons": ["stop"]}),
        span({"openinference.span.kind": "LLM", "llm.token_count.prompt": 2}),
        span({}, name="llm_request", status_code=Status.STATUS_CODE_ERROR),
        resource={"tpmledger.run.id": "fit", "tpmledger.shard.count": "2"},
    )
    with raw_transaction(database_url) as conn:
        assert write_attempts(conn, batch.rows) == 3
    with raw_transaction(database_url) as conn:
        stored = conn.execute(
            "SELECT convention, span_attributes->>'llm.token_count.prompt', finish_reasons "
            "FROM attempts ORDER BY convention"
        ).fetchall()
    assert stored == [
        ("openinference", "2", None),
        ("semconv", None, ["stop"]),
        ("vllm", None, None),
    ]
