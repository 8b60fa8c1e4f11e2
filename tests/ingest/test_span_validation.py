"""Invalid spans are rejected with a reason; the rest of the request is kept
(docs/conventions.md)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.ingest.span_builders import (
    BASE_NS,
    LLM,
    NOW_NS,
    as_columns,
    normalize,
    request,
    span,
)
from tpmledger.ingest import span_validation as check
from tpmledger.ingest.conventions import TOKEN_KEYS
from tpmledger.ingest.normalize import MAX_REASONS, normalize_payload

DAY_NS = 86_400 * 1_000_000_000
Y2000_NS = 946_684_800 * 1_000_000_000
TOKEN = "gen_ai.usage.input_tokens"


def _reject(**span_fields: Any) -> str:
    attributes = span_fields.pop("attributes", LLM)
    resource = span_fields.pop("resource", None)
    batch = normalize(span(attributes, **span_fields), resource=resource)
    assert (batch.rows, batch.rejected) == ([], 1), batch
    assert len(batch.reject_reasons) == 1
    return batch.reject_reasons[0]


@pytest.mark.parametrize(
    ("span_fields", "reason"),
    [
        ({"trace_id": bytes(16)}, check.REASON_TRACE_ID),
        ({"trace_id": b"\x01" * 8}, check.REASON_TRACE_ID),
        ({"trace_id": b""}, check.REASON_TRACE_ID),
        ({"span_id": bytes(8)}, check.REASON_SPAN_ID),
        ({"span_id": b"\x01" * 16}, check.REASON_SPAN_ID),
        ({"parent_span_id": b"\x01" * 4}, check.REASON_PARENT_SPAN_ID),
        ({"start_ns": BASE_NS, "end_ns": BASE_NS - 1}, check.REASON_END_BEFORE_START),
        ({"start_ns": Y2000_NS - 1, "end_ns": BASE_NS}, check.REASON_TIME_RANGE),
        ({"start_ns": 0, "end_ns": 0}, check.REASON_TIME_RANGE),
        ({"start_ns": BASE_NS, "end_ns": NOW_NS + DAY_NS + 1}, check.REASON_TIME_RANGE),
        # One span from 2000-01-01 to now: accepted once, it made the concurrency series
        # (and the live worker's minutes) grow with its 26 years.
        ({"start_ns": Y2000_NS, "end_ns": NOW_NS}, check.REASON_DURATION),
        ({"start_ns": BASE_NS, "end_ns": BASE_NS + DAY_NS + 1}, check.REASON_DURATION),
        (
            {"attributes": {**LLM, "tpmledger.queue.wait_s": 1e9}, "start_ns": BASE_NS},
            check.REASON_QUEUE_WAIT,
        ),
    ],
)
def test_id_and_time_rules(span_fields: dict[str, Any], reason: str) -> None:
    assert _reject(**span_fields) == reason


def test_time_bounds_are_inclusive() -> None:
    batch = normalize(
        span(LLM, start_ns=Y2000_NS, end_ns=Y2000_NS),
        span(LLM, start_ns=NOW_NS, end_ns=NOW_NS + DAY_NS),
    )
    assert (len(batch.rows), batch.rejected) == (2, 0)


@pytest.mark.parametrize(
    "value",
    [-1, 1_000_000_001, 2**62, 1.5, -2.0, 1e10, "12", "", True, [1], {"n": 1}, float("nan")],
)
@pytest.mark.parametrize("key", ["gen_ai.usage.output_tokens", "llm.token_count.prompt"])
def test_token_counts_must_be_integers_in_range(key: str, value: Any) -> None:
    reason = _reject(attributes={**LLM, key: value})
    assert reason == check.token_reason(key)
    assert key in reason


@pytest.mark.parametrize(("value", "stored"), [(0, 0), (10**9, 10**9), (42.0, 42), (7, 7)])
def test_integral_token_counts_are_accepted(value: Any, stored: int) -> None:
    batch = normalize(span({TOKEN: value}))
    assert as_columns(batch.rows[0])["prompt_tokens"] == stored


def test_shadowed_and_resource_token_keys_are_validated_too() -> None:
    # The losing key of a field is not stored but must still be a valid count.
    shadowed = {TOKEN: 5, "gen_ai.usage.prompt_tokens": -5}
    assert _reject(attributes=shadowed) == check.token_reason("gen_ai.usage.prompt_tokens")
    assert _reject(resource={"llm.token_count.total": "x"}) == check.token_reason(
        "llm.token_count.total"
    )


def test_non_llm_spans_are_ignored_not_validated() -> None:
    batch = normalize(span({"http.request.method": "GET"}, trace_id=bytes(16)))
    assert (batch.ignored, batch.rejected, batch.reject_reasons) == (1, 0, [])


def test_partial_batch_keeps_the_valid_spans() -> None:
    good = [span({**LLM, TOKEN: n}) for n in range(3)]
    bad = [
        span(LLM, trace_id=bytes(16)),
        span({**LLM, TOKEN: -1}),
        span({**LLM, TOKEN: -2}),
        span(LLM, start_ns=BASE_NS, end_ns=BASE_NS - 5),
    ]
    other = span({"db.system": "postgresql"})
    batch = normalize(good[0], bad[0], good[1], bad[1], other, bad[2], good[2], bad[3])
    assert [as_columns(r)["prompt_tokens"] for r in batch.rows] == [0, 1, 2]
    assert (batch.rejected, batch.ignored) == (4, 1)
    assert batch.reject_reasons == [
        check.REASON_TRACE_ID,
        check.token_reason(TOKEN),
        check.REASON_END_BEFORE_START,
    ]


def test_reasons_are_distinct_and_bounded() -> None:
    keys = sorted(k for k in TOKEN_KEYS if k.startswith("gen_ai.usage"))
    spans = [span({**LLM, key: -1}) for key in keys for _ in range(2)]
    batch = normalize(*spans)
    assert batch.rejected == len(spans)
    assert len(batch.reject_reasons) == MAX_REASONS
    assert len(set(batch.reject_reasons)) == MAX_REASONS


def test_undecodable_attribute_rejects_only_its_span() -> None:
    # An attribute key that is not valid UTF-8: the lean wire view keeps attributes as
    # bytes until they are decoded, so this must surface as a rejection of that span.
    marker = b"key-to-corrupt"
    bad = span({**LLM, marker.decode(): 1})
    payload = request(span(LLM), bad).SerializeToString()
    corrupted = payload.replace(marker, b"\xff" * len(marker))
    batch = normalize_payload(corrupted, now_ns=NOW_NS)
    assert (len(batch.rows), batch.rejected) == (1, 1)
    assert batch.reject_reasons == ["span attributes are not valid OTLP KeyValues"]


def test_invalid_utf8_in_a_resource_attribute_rejects_its_spans_with_a_reason() -> None:
    # Before: the resource's attributes were dropped and its spans stored under run
    # "unassigned", shard "unknown", with no word to the sender.
    marker = "run-to-corrupt"
    payload = request(span(LLM), span(LLM), resource={"tpmledger.run.id": marker})
    corrupted = payload.SerializeToString().replace(marker.encode(), b"\xff" * len(marker))
    batch = normalize_payload(corrupted, now_ns=NOW_NS)
    assert (batch.rows, batch.rejected) == ([], 2)
    assert batch.reject_reasons == [
        "resource attributes are not valid OTLP KeyValues (e.g. invalid UTF-8)"
    ]


@pytest.mark.parametrize(
    "resource",
    [
        {"tpmledger.run.id": "r" * 10_000},
        {"tpmledger.run.id": "run", "tpmledger.shard.id": "s" * 513},
        {"tpmledger.run.id": "bad\x00run"},
        {"service.name": "svc\x00", "tpmledger.shard.id": "0"},
        {"tpmledger.run.id": "run", "tpmledger.shard.id": "\x00"},
    ],
)
def test_oversized_or_nul_ids_reject_only_their_spans(resource: dict[str, Any]) -> None:
    assert _reject(resource=resource) == check.REASON_ID_LENGTH
    call = {**LLM, "tpmledger.call.id": "c" * 600}
    batch = normalize(span(LLM), span(call))
    assert (len(batch.rows), batch.rejected) == (1, 1)  # the valid neighbour is kept
    assert batch.reject_reasons == [check.REASON_ID_LENGTH]


def test_a_nul_in_a_span_id_attribute_rejects_that_span_only() -> None:
    # Before: NULs were stripped from ids, so "a\x00b" was stored as run "ab".
    batch = normalize(span(LLM), span({**LLM, "tpmledger.call.id": "call\x00"}))
    assert (len(batch.rows), batch.rejected) == (1, 1)
    assert batch.reject_reasons == [check.REASON_ID_LENGTH]
    # NULs elsewhere are still stripped, not refused.
    kept = normalize(span({**LLM, "gen_ai.request.model": "m\x00"}))
    assert (len(kept.rows), kept.rejected) == (1, 0)


def test_a_shard_named_star_is_rejected_as_it_names_the_whole_run() -> None:
    assert _reject(resource={"tpmledger.run.id": "r", "tpmledger.shard.id": "*"}) == (
        check.REASON_WHOLE_RUN_SHARD
    )
