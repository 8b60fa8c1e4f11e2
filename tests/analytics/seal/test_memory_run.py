"""fold_events: the streaming walk over events in memory, as one chunk, equals the whole-run
oracle (no database; the property test over stored runs is test_run_stream.py)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from tests.analytics.golden_events import CAPS, golden_events
from tests.analytics.oracle.whole_run import analyze_events
from tests.analytics.seal.test_run_stream import sparse_of
from tpmledger.analytics.kernels.event_plans import CALL_ORDER
from tpmledger.analytics.kernels.run_figures import RunContext
from tpmledger.analytics.seal.memory_run import call_places, fold_events
from tpmledger.analytics.seal.run_chunks import CallOrder
from tpmledger.provenance.event_schema import EVENT_SCHEMA

CONTEXT = RunContext(run_id="g", caps=CAPS, declared_shard_count=2, concurrency_cap=1)


@pytest.mark.parametrize(
    ("events", "context"),
    [
        (golden_events(), CONTEXT),
        (golden_events().sample(fraction=1.0, shuffle=True, seed=3), CONTEXT),  # any row order
        (golden_events(resend_count=None), RunContext()),  # run id from the events
        (pl.DataFrame(schema=EVENT_SCHEMA), RunContext(run_id="empty")),  # an empty run
    ],
    ids=["golden", "shuffled", "no-resend-count", "empty"],
)
def test_one_chunk_equals_the_whole_run_oracle(events: pl.DataFrame, context: RunContext) -> None:
    folded, whole = fold_events(events, context), analyze_events(events, context)
    assert_frame_equal(folded.minutes, sparse_of(whole.minutes))
    assert folded.figures == whole.figures


def test_call_places_are_the_plans() -> None:
    events = golden_events().sample(fraction=1.0, shuffle=True, seed=5)
    repeated = events.filter(pl.len().over("call_id") > 1)
    position, last = call_places(events)
    expected = CallOrder(repeated, events.select("trace_id", "span_id").clear()).of(events)
    assert position.tolist() == expected[0].tolist()
    assert last.tolist() == expected[1].tolist()
    assert position.max() > 0  # the golden run has a call with several attempts


def test_call_places_of_many_calls_match_a_whole_frame_ranking() -> None:
    """Random calls (null call ids, ties on the start and end, most calls repeated) rank as
    a sort of every row by (call_id, start_ns, end_ns, span_id, trace_id) ranks them."""
    rng = np.random.default_rng(7)
    n = 5_000
    calls = rng.integers(0, 1_500, n)
    events = pl.DataFrame(
        {
            "call_id": [None if c == 0 else f"c{c}" for c in calls],
            "start_ns": rng.integers(0, 20, n),
            "end_ns": rng.integers(0, 20, n),
            "span_id": [f"s{i % 13}" for i in range(n)],
            "trace_id": [f"t{i}" for i in range(n)],
        }
    )
    expected = (
        events.with_row_index("row")
        .sort("call_id", *CALL_ORDER)
        .select(
            "row",
            position=pl.int_range(pl.len(), dtype=pl.Int64).over("call_id"),
            calls=pl.len().over("call_id"),
        )
        .sort("row")
    )
    position, last = call_places(events)
    assert position.tolist() == expected["position"].to_list()
    wanted_last = expected["position"] == expected["calls"] - 1
    assert last.tolist() == wanted_last.to_list()
    assert (calls == 0).sum() > 1 and position.max() > 3  # several null ids; long calls
