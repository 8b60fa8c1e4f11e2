"""Rollup spans (an LLM span with a stored LLM descendant) are left out of every figure."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.analytics.kernels.rollups import attempts_to_events, shard_caps
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.provenance.event_file import EVENT_COLUMNS
from tpmledger.storage.readers.attempt_frames import ATTEMPT_FRAME_SCHEMA


def _attempt(trace: str, span: str, parent: str | None, **extra: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(ATTEMPT_FRAME_SCHEMA)
    row |= {
        "trace_id": trace,
        "span_id": span,
        "parent_span_id": parent,
        "call_id": span,
        "end_ns": BASE_NS + 2,
        "start_ns": BASE_NS,
        "run_id": "r",
        "shard_id": "0",
        "status": "ok",
        "prompt_tokens": 100,
        "completion_tokens": 50,
    }
    return row | extra


def test_parent_with_stored_llm_child_is_a_rollup() -> None:
    attempts = pl.DataFrame(
        [
            _attempt("t1", "framework", "http-root"),  # rollup: 'client' names it as parent
            _attempt("t1", "client", "framework"),
            _attempt("t2", "framework", None),  # same span id, other trace: not a rollup
            _attempt("t3", "agent", None),  # LLM -> tool (not stored) -> LLM: both kept
            _attempt("t3", "inner", "tool-span"),
            _attempt("t4", "outer", None),  # a chain of three: two rollups
            _attempt("t4", "middle", "outer"),
            _attempt("t4", "leaf", "middle"),
        ],
        schema=ATTEMPT_FRAME_SCHEMA,
    )
    events = attempts_to_events(attempts)
    assert events.columns == list(EVENT_COLUMNS)
    kept = sorted(zip(events["trace_id"], events["span_id"], strict=True))
    assert kept == [
        ("t1", "client"),
        ("t2", "framework"),
        ("t3", "agent"),
        ("t3", "inner"),
        ("t4", "leaf"),
    ]


def test_shard_caps_from_attempts() -> None:
    attempts = pl.DataFrame(
        [
            _attempt("t", "1", None, concurrency_cap=8),
            _attempt("t", "2", None, concurrency_cap=16, shard_id="1"),
            _attempt("t", "3", None),
        ],
        schema=ATTEMPT_FRAME_SCHEMA,
    )
    assert shard_caps(attempts) == {"0": 8, "1": 16}


@pytest.mark.slow
def test_sealed_tokens_count_a_nested_pair_once(database_url: str) -> None:
    trace = bytes.fromhex("ab" * 16)
    parent, child = bytes.fromhex("01" * 8), bytes.fromhex("02" * 8)
    store(
        database_url,
        [
            attempt_row(run_id="nested", trace_id=trace, span_id=parent),
            attempt_row(run_id="nested", trace_id=trace, span_id=child, parent_span_id=parent),
        ],
    )
    metrics = seal_run(database_url, "nested").metrics
    assert metrics["attempts"] == 1
    assert metrics["tokens"] == {"prompt": 100, "completion": 50, "total": 150}
