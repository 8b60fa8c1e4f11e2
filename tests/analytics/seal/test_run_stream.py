"""The streaming seal equals a whole-run pass: same minute table, figures and digests.

Random runs (rollup parents and children, explicit calls whose attempts end in different
chunks, resend counts present or absent, queue waits reaching back before the first
minute and across chunk edges, caps) are stored through the real write path; the run is
then computed chunk by chunk (chunks as small as one attempt's worth of minutes) and
compared with the whole-run test oracle (:func:`tests.analytics.oracle.whole_run.analyze_events`)
over the whole run read at once, and the streamed file digests with the file built whole.
"""

from __future__ import annotations

import gc
import itertools
import os
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from tests.analytics.live.test_live_minutes import _rows, attempt_specs
from tests.analytics.oracle.whole_run import analyze_events
from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.analytics.kernels.minute_table import EMPTY_COUNTS, carries_figures
from tpmledger.analytics.kernels.rollups import attempts_to_events, shard_caps
from tpmledger.analytics.kernels.run_figures import RunContext
from tpmledger.analytics.seal import run_chunks
from tpmledger.analytics.seal.memory_run import fold_events
from tpmledger.analytics.seal.minute_leaves import leaves_from_minutes
from tpmledger.analytics.seal.minute_tree import tree_from_leaves
from tpmledger.analytics.seal.run_chunks import CallOrder, chunk_ranges, fetch_slices
from tpmledger.analytics.seal.run_computation import RunComputation, compute_run, load_run
from tpmledger.analytics.seal.seal_chunk import SealChunk
from tpmledger.provenance.event_file import build_event_file
from tpmledger.storage.readers.seal_reads import SealPlan, SealScope, fetch_seal_plan
from tpmledger.storage.schema.minute_keys import WHOLE_RUN
from tpmledger.storage.server.database import raw_transaction

MINUTE = 60_000_000_000


def _whole_run(url: str, run_id: str, end_before_ns: int | None = None) -> tuple[Any, ...]:
    facts, attempts = load_run(url, run_id, end_before_ns)
    events = attempts_to_events(attempts)
    context = RunContext(
        run_id=run_id,
        caps=shard_caps(attempts),
        declared_shard_count=facts.declared_shard_count,
        concurrency_cap=facts.concurrency_cap,
        sweep_id=facts.sweep_id,
    )
    return events, context, analyze_events(events, context)


def sparse_of(dense: pl.DataFrame) -> pl.DataFrame:
    """The oracle's dense table as the stream keeps it: a shard's minutes where nothing
    ended, ran or waited are left out. Those must be exactly the empty row the readers
    fill in (counts and samples 0, nothing measured, the run's rules applied)."""
    dropped = dense.filter(~carries_figures())
    for row in dropped.iter_rows(named=True):
        assert row["shard_id"] != WHOLE_RUN
        for name in EMPTY_COUNTS:
            if name == "retries":
                assert row[name] in (0, None)
            else:
                assert row[name] == 0, (name, row)
        assert row["in_flight_mean"] == 0.0 and row["in_flight_max"] == 0
        assert (row["queue_depth_mean"], row["queue_depth_max"]) in ((0.0, 0), (None, None))
        nulls = [n for n in row if n.startswith(("ttft_", "latency_")) or n.endswith("_rate")]
        assert all(row[n] is None for n in nulls), row
    return dense.filter(carries_figures())


def _assert_equal(
    url: str, run_id: str, chunk_attempts: int, end_before_ns: int | None
) -> RunComputation:
    streamed = compute_run(url, run_id, end_before_ns=end_before_ns, chunk_attempts=chunk_attempts)
    events, context, whole = _whole_run(url, run_id, end_before_ns)
    assert_frame_equal(streamed.analysis.minutes, sparse_of(whole.minutes))
    assert streamed.analysis.figures == whole.figures
    # The same walk over the events in memory, as one chunk (empty runs, summaries).
    folded = fold_events(events, context)
    assert_frame_equal(folded.minutes, sparse_of(whole.minutes))
    assert folded.figures == whole.figures
    file = build_event_file(events)
    assert (streamed.file.sha256, streamed.file.count) == (file.sha256, file.count)
    if events.height:
        assert streamed.tree.root == tree_from_leaves(leaves_from_minutes(whole.minutes, file)).root
    return streamed


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    specs=st.lists(attempt_specs, min_size=1, max_size=40),
    chunk_attempts=st.integers(1, 40),
    cut_minute=st.one_of(st.none(), st.integers(1, 6)),
)
@pytest.mark.slow
def test_streamed_run_equals_the_whole_run(
    database_url: str, specs: list[dict[str, Any]], chunk_attempts: int, cut_minute: int | None
) -> None:
    run_id = f"stream-{os.urandom(4).hex()}"
    store(database_url, _rows(run_id, specs))
    end_before = None if cut_minute is None else BASE_NS - BASE_NS % MINUTE + cut_minute * MINUTE
    _assert_equal(database_url, run_id, chunk_attempts, end_before)


def test_a_call_split_across_chunks_is_counted_once(database_url: str) -> None:
    second = 1_000_000_000
    rows = [
        attempt_row(
            run_id="calls",
            call_id="c-1",
            call_id_explicit=True,
            resend_count=None,
            start_ns=BASE_NS + m * MINUTE,
            end_ns=BASE_NS + m * MINUTE + 2 * second,
            status="ok" if m == 4 else "error",
            error_type=None if m == 4 else "rate_limit",
        )
        for m in (0, 2, 4)
    ]
    store(database_url, rows)
    computation = compute_run(database_url, "calls", chunk_attempts=1)
    figures = computation.metrics
    assert figures["logical_calls"] == 1
    assert figures["call_success_rate"] == 1.0
    assert figures["retry_causes"] == {"rate_limit": 2}
    assert figures["retry_rate"] == round(2 / 3, 12)
    _assert_equal(database_url, "calls", 1, None)


def test_chunks_cover_every_minute_once(database_url: str) -> None:
    store(
        database_url,
        [
            attempt_row(
                run_id="plan", start_ns=BASE_NS + m * MINUTE, end_ns=BASE_NS + m * MINUTE + 1
            )
            for m in range(10)
        ],
    )
    with raw_transaction(database_url) as conn:
        plan = fetch_seal_plan(conn, "plan", SealScope())
    for size in (1, 3, 7, 100):
        ranges = chunk_ranges(plan, size)
        assert ranges[0][0] == BASE_NS // MINUTE * MINUTE
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        assert ranges[-1][1] == ((BASE_NS + 9 * MINUTE) // MINUTE + 1) * MINUTE


def test_call_order_groups_by_the_real_call_id_whatever_the_hash_brought_in() -> None:
    # The call set is found by a 64-bit hash of the call id: a colliding call with one
    # attempt may come in with the repeated ones; it stays the first and last of its call.
    repeated = pl.DataFrame(
        {
            "trace_id": ["t1", "t2", "t3"],
            "span_id": ["s1", "s2", "s3"],
            "call_id": ["a", "a", "b"],
            "start_ns": [2, 1, 1],
            "end_ns": [3, 2, 2],
        }
    )
    order = CallOrder(repeated, pl.DataFrame(schema={"trace_id": pl.String, "span_id": pl.String}))
    events = pl.DataFrame(
        {"trace_id": ["t3", "t1", "t2", "t9"], "span_id": ["s3", "s1", "s2", "s9"]}
    )
    position, last = order.of(events)
    assert position.tolist() == [0, 1, 0, 0]
    assert last.tolist() == [True, True, False, True]


DAY = 1_440 * MINUTE
# Far apart next to a chunk (a few minutes here), and next to any attempt's reach; hours,
# not days: every minute between is a chunk of its own when chunks are one minute long,
# and days of them made this the slowest test of the suite (~190 s) for the same cases.
GAP = 120 * MINUTE


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    specs=st.lists(attempt_specs, min_size=1, max_size=12),
    gaps=st.lists(st.sampled_from([0, 0, 1, 2]), min_size=12, max_size=12),
    chunk_attempts=st.integers(1, 12),
)
@pytest.mark.slow
def test_a_sparse_run_equals_the_whole_run(
    database_url: str, specs: list[dict[str, Any]], gaps: list[int], chunk_attempts: int
) -> None:
    # Attempts hours apart: most (shard, minute) cells are empty, and left out.
    for spec, gap in zip(specs, gaps, strict=False):
        spec["start_ms"] += gap * GAP // 1_000_000
    run_id = f"sparse-{os.urandom(4).hex()}"
    store(database_url, _rows(run_id, specs))
    _assert_equal(database_url, run_id, chunk_attempts, None)


@pytest.mark.slow
def test_a_sparse_run_keeps_rows_for_its_attempts_not_for_shards_times_minutes(
    database_url: str,
) -> None:
    # 20 shards, each one short attempt now and one 3 days later: 4,321 minutes.
    second = 1_000_000_000
    rows = [
        attempt_row(
            run_id="far-apart",
            shard_id=f"s{shard:02d}",
            concurrency_cap=4,
            queue_wait_s=0.5,
            start_ns=BASE_NS + day * 3 * DAY + shard * second,
            end_ns=BASE_NS + day * 3 * DAY + shard * second + 2 * second,
        )
        for shard in range(20)
        for day in (0, 1)
    ]
    store(database_url, rows)
    streamed = _assert_equal(database_url, "far-apart", 1_000, None)
    table = streamed.analysis.minutes
    whole = table.filter(pl.col("shard_id") == WHOLE_RUN)
    shards = table.filter(pl.col("shard_id") != WHOLE_RUN)
    assert streamed.tree.tree_size == whole.height == 3 * 1_440 + 1  # one leaf per minute
    # A shard's rows are the minutes its attempts ended, ran or waited in (at most two
    # minutes per attempt here), never its 4,321 minutes.
    assert shards.height <= 2 * len(rows)
    assert shards.height >= len(rows)


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    specs=st.lists(attempt_specs, min_size=1, max_size=40),
    fetch_attempts=st.integers(1, 6),
    cut_minute=st.one_of(st.none(), st.integers(1, 6)),
)
@pytest.mark.slow
def test_full_minutes_read_in_slices_one_chunk_at_a_time_equal_the_whole_run(
    database_url: str, specs: list[dict[str, Any]], fetch_attempts: int, cut_minute: int | None
) -> None:
    # Every chunk counts as full: it is read in end-time slices of a few attempts and
    # finished before the next is read; nothing of the result changes.
    run_id = f"slices-{os.urandom(4).hex()}"
    store(database_url, _rows(run_id, specs))
    end_before = None if cut_minute is None else BASE_NS - BASE_NS % MINUTE + cut_minute * MINUTE
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_chunks, "FETCH_ATTEMPTS", fetch_attempts)
        patch.setattr(run_chunks, "PREFETCH_MAX_ATTEMPTS", 0)
        _assert_equal(database_url, run_id, 40, end_before)


def test_slices_cover_the_range_once_and_follow_the_runs_rate() -> None:
    low = BASE_NS - BASE_NS % MINUTE
    plan = SealPlan(600, low, low + 2 * MINUTE - 1, 0, {}, ("0",))  # 300 a minute
    slices = fetch_slices(plan, low, low + MINUTE, 50)
    assert len(slices) == 6 and slices[0][0] == low and slices[-1][1] == low + MINUTE
    assert all(a[1] == b[0] for a, b in itertools.pairwise(slices))
    assert fetch_slices(plan, low, low + MINUTE, 1_000) == [(low, low + MINUTE)]


@pytest.mark.slow
def test_a_full_chunk_is_let_go_before_the_next_is_read(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three minutes of 5 attempts each, every chunk "full": when a chunk is read, no
    # other chunk is alive (nothing prefetched, the walk and its file write let go).
    rows = [
        attempt_row(
            run_id="full",
            start_ns=BASE_NS + m * MINUTE + i,
            end_ns=BASE_NS + m * MINUTE + 1_000 + i,
        )
        for m in range(3)
        for i in range(5)
    ]
    store(database_url, rows)
    monkeypatch.setattr(run_chunks, "PREFETCH_MAX_ATTEMPTS", 4)
    alive_at_reads: list[int] = []
    read = run_chunks.RunChunks.chunk

    def counting_read(self: run_chunks.RunChunks, low_ns: int, high_ns: int) -> SealChunk:
        gc.collect()
        alive_at_reads.append(sum(type(o) is SealChunk for o in gc.get_objects()))
        return read(self, low_ns, high_ns)

    monkeypatch.setattr(run_chunks.RunChunks, "chunk", counting_read)
    computation = compute_run(database_url, "full", chunk_attempts=5)
    assert computation.file.count == 15
    assert alive_at_reads == [0, 0, 0]
