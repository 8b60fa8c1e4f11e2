"""Concurrency samples: the runs equal counting intervals per second, whichever way they
are built, and no cost grows with the seconds one interval covers."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from functools import cache
from typing import Any
from unittest import mock

import numba
import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.analytics.golden_events import MINUTE0_NS, S
from tests.analytics.oracle.minute_samples import minute_samples
from tests.analytics.oracle.whole_run import minute_concurrency, work_conserving
from tpmledger.analytics.kernels import concurrency
from tpmledger.analytics.kernels.concurrency import SecondSeries, second_series
from tpmledger.provenance.event_file import EVENT_SCHEMA

SPANS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.integers(0, 150 * S),  # start, ns after minute 0
        st.integers(0, 40 * S),  # duration
        st.one_of(st.none(), st.sampled_from([-1.0, 0.0, 0.5, 3.0, 61.25, 200.0])),
    ),
    min_size=1,
    max_size=25,
)
Span = tuple[str, int, int, float | None]


def _events(spans: list[Span]) -> pl.DataFrame:
    rows = [
        {
            "shard_id": shard,
            "start_ns": MINUTE0_NS + start,
            "end_ns": MINUTE0_NS + start + duration,
            "queue_wait_s": wait,
            "span_id": f"{i:016x}",
        }
        for i, (shard, start, duration, wait) in enumerate(spans)
    ]
    return pl.DataFrame(rows).select(
        pl.col(n).cast(t) if n in rows[0] else pl.lit(None, t).alias(n)
        for n, t in EVENT_SCHEMA.items()
    )


@contextmanager
def _built_from_steps() -> Iterator[None]:
    """Force the sorted-steps construction (used for large grids) on any grid."""
    with (
        mock.patch.object(concurrency, "DENSE_CELLS_PER_ATTEMPT", 0),
        mock.patch.object(concurrency, "DENSE_CELLS_FLOOR", 0),
    ):
        yield


# Spans whose end may come before their start (ingest refuses them, docs/ingest.md#limits;
# a stored row or an events file may still hold one): a start up to 150 s after the last
# end or an end up to 150 s before the first start falls outside a grid built from the ends.
REVERSED_SPANS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.integers(0, 150 * S),
        st.integers(-150 * S, 40 * S),  # duration, negative: ends before it starts
        st.one_of(st.none(), st.sampled_from([-1.0, 0.0, 3.0, 61.25])),
    ),
    min_size=1,
    max_size=25,
)
_PER_SECOND_LOOPS = ("second_grid", "sparse_steps", "sparse_runs", "dense_runs")


@cache
def _index_checked_loops() -> dict[str, Callable[..., Any]]:
    """The per-second loops compiled with index checks (the product's skip them): a step
    outside an array raises IndexError here instead of writing past it."""
    return {
        name: numba.njit(boundscheck=True)(getattr(concurrency, name).py_func)
        for name in _PER_SECOND_LOOPS
    }


def _samples(series: SecondSeries, row: int) -> tuple[np.ndarray, np.ndarray]:
    """Row ``row``'s samples at every second of the grid, expanded from its runs."""
    width = series.last_second - series.first_second
    flight = np.zeros(width, dtype=np.int64)
    depth = np.zeros(width, dtype=np.int64)
    lo, hi = series.offsets[row], series.offsets[row + 1]
    for k in range(lo, hi):
        end = series.run_start[k + 1] if k + 1 < hi else series.last_second
        part = slice(series.run_start[k] - series.first_second, end - series.first_second)
        flight[part] = series.run_in_flight[k]
        depth[part] = series.run_queue_depth[k]
    return flight, depth


def _brute(events: pl.DataFrame, shard: str | None, second: int) -> tuple[int, int]:
    """(in flight, queue depth) at the instant ``second`` by counting every span."""
    t = second * S
    in_flight = depth = 0
    rows = events if shard is None else events.filter(pl.col("shard_id") == shard)
    for row in rows.iter_rows(named=True):
        in_flight += row["start_ns"] <= t < row["end_ns"]
        wait = row["queue_wait_s"]
        if wait is not None and wait >= 0:
            queued_at = row["start_ns"] - round(wait * S)
            depth += queued_at <= t < row["start_ns"]
    return in_flight, depth


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(SPANS)
def test_series_match_counting_each_interval(spans: list[Span]) -> None:
    events = _events(spans)
    dense = second_series(events)
    with _built_from_steps():
        sparse = second_series(events)
    for name in ("offsets", "run_start", "run_in_flight", "run_queue_depth"):
        assert np.array_equal(getattr(dense, name), getattr(sparse, name)), name
    series = dense
    assert series.first_second % 60 == 0 and series.last_second % 60 == 0
    for row, shard in enumerate([*series.shard_ids, None]):
        flight, depth = _samples(series, row)
        for col in range(0, flight.size, 7):
            expected = _brute(events, shard, series.first_second + col)
            assert (int(flight[col]), int(depth[col])) == expected, (shard, col)
    reporting = set(events.filter(pl.col("queue_wait_s").is_not_null())["shard_id"].to_list())
    assert series.queue_shards == reporting


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(REVERSED_SPANS, st.booleans())
def test_an_attempt_that_ends_before_it_starts_is_never_in_flight(
    spans: list[Span], from_steps: bool
) -> None:
    # The per-second loops do not check indexes: a step outside the grid once wrote past
    # the samples array (heap corruption: figures that depended on the process's history,
    # and crashes at interpreter exit).
    events = _events(spans)
    with (
        mock.patch.multiple(concurrency, **_index_checked_loops()),
        _built_from_steps() if from_steps else nullcontext(),
    ):
        series = second_series(events)
    for row, shard in enumerate([*series.shard_ids, None]):
        flight, depth = _samples(series, row)
        for col in range(0, flight.size, 7):
            expected = _brute(events, shard, series.first_second + col)
            assert (int(flight[col]), int(depth[col])) == expected, (shard, col)


@pytest.mark.slow
@settings(max_examples=30, deadline=None)
@given(SPANS, st.booleans())
def test_minute_figures_and_sag_from_the_samples(spans: list[Span], from_steps: bool) -> None:
    events = _events(spans)
    if from_steps:
        with _built_from_steps():
            series = second_series(events)
    else:
        series = second_series(events)
    caps = {"a": 2, "b": 1}
    table = minute_concurrency(series, caps)
    width = series.last_second - series.first_second
    seconds = series.first_second + np.arange(width)
    columns = [_samples(series, row) for row in range(len(series.shard_ids) + 1)]
    samples = pl.DataFrame(
        {
            "shard_id": [s for s in [*series.shard_ids, "*"] for _ in range(width)],
            "second": np.tile(seconds, len(columns)),
            "in_flight": np.concatenate([flight for flight, _ in columns]),
            "queue_depth": np.concatenate([depth for _, depth in columns]),
        }
    ).with_columns(minute_ns=pl.col("second") // 60 * 60 * S)
    # Figures cover the window: the minutes of the run's first to last end time.
    end_minutes = (events["end_ns"] // (60 * S)) * 60 * S
    window = samples.filter(pl.col("minute_ns").is_between(end_minutes.min(), end_minutes.max()))
    expected = window.group_by("shard_id", "minute_ns").agg(
        in_flight_mean=pl.col("in_flight").mean(),
        in_flight_max=pl.col("in_flight").max(),
        queue_depth_max=pl.col("queue_depth").max(),
    )
    got = table.join(expected, on=["shard_id", "minute_ns"], how="full", suffix="_x")
    assert got.height == expected.height == table.height
    assert (got["in_flight_mean"] == got["in_flight_mean_x"]).all()
    assert (got["in_flight_max"] == got["in_flight_max_x"]).all()
    queued = got.filter(pl.col("queue_depth_max").is_not_null())
    assert (queued["queue_depth_max"] == queued["queue_depth_max_x"]).all()
    caps_of = table.select("shard_id", "concurrency_cap").unique()
    for shard, cap in caps_of.iter_rows():
        assert cap == {"a": 2, "b": 1, "*": 3}.get(shard)
    shard_samples = samples.filter(pl.col("shard_id") != "*")
    in_minutes = minute_samples(series, caps)
    for row, shard in enumerate(series.shard_ids):
        mine = window.filter((pl.col("shard_id") == shard) & (pl.col("queue_depth") > 0))
        per_minute = mine.group_by("minute_ns").agg(
            queued=pl.len(),
            sag=(pl.col("in_flight") < 0.9 * caps.get(shard, 0)).sum(),
        )
        for minute_ns, n_queued, n_sag in per_minute.iter_rows():
            column = int(np.flatnonzero(in_minutes.minute_ns == minute_ns)[0])
            assert in_minutes.queue_seconds[row, column] == n_queued
            assert in_minutes.sag_seconds[row, column] == (n_sag if shard in caps else 0)
        assert in_minutes.queue_seconds[row].sum() == mine.height
    queued = shard_samples.filter(
        pl.col("shard_id").is_in([s for s in caps if s in series.queue_shards])
        & (pl.col("queue_depth") > 0)
    ).with_columns(cap=pl.col("shard_id").replace_strict(caps, return_dtype=pl.Float64))
    result = work_conserving(series, caps)
    if any(s in series.queue_shards for s in caps):
        assert result["seconds_with_queue"] == queued.height
        sag = queued.filter(pl.col("in_flight") < 0.9 * pl.col("cap")).height
        assert result["sag_share"] == (sag / queued.height if queued.height else None)
    else:
        assert result["sag_share"] is None and result["seconds_with_queue"] is None


def test_a_window_outside_the_runs_seconds_has_no_minutes() -> None:
    events = _events([("a", 0, 10 * S, None)])
    series = second_series(events, window=(MINUTE0_NS + 3_600 * S, 5))
    assert series.window_minutes == 0
    assert minute_concurrency(series, None).height == 0


# One attempt from 2000-01-01 to 2026 (it was accepted once, before spans had a length
# limit): 26 years of per-second samples took the analytics worker to 15 GB and beyond.
_LONG_SPAN = """
import resource
limit = 1024 * 2**20  # private memory of this process, Python and the kernels included
resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
import polars as pl
from tests.analytics.oracle.live_window import live_minute_rows
from tpmledger.analytics.kernels.run_figures import RunContext
from tpmledger.analytics.seal.memory_run import fold_events
from tpmledger.provenance.event_file import EVENT_SCHEMA
base = {name: None for name in EVENT_SCHEMA}
start, end = 946_684_800 * 10**9, 1_769_917_470 * 10**9  # 2000-01-01 .. 2026-02-01
rows = [
    base | {"run_id": "r", "shard_id": "s", "span_id": "a", "call_id": "a",
            "start_ns": start, "end_ns": end, "status": "ok", "queue_wait_s": 30.0},
    base | {"run_id": "r", "shard_id": "s", "span_id": "b", "call_id": "b",
            "start_ns": end - 5 * 10**9, "end_ns": end, "status": "ok"},
]
events = pl.DataFrame(rows, schema=EVENT_SCHEMA)
result = fold_events(events, RunContext(caps={"s": 2}))
whole = result.minutes.filter(pl.col("shard_id") == "*").row(0, named=True)
print(result.minutes.height, whole["in_flight_max"], whole["in_flight_mean"],
      result.figures["work_conserving"]["seconds_with_queue"])
window = events.with_columns(rollup=pl.lit(0), later_in_call=pl.lit(0),
                             call_id_explicit=pl.lit(1), concurrency_cap=pl.lit(2))
live = live_minute_rows(window, [end // 60_000_000_000 * 60_000_000_000], {"s": 2})
print(live.filter(pl.col("shard_id") == "*")["in_flight_max"].to_list())
"""


@pytest.mark.slow
def test_a_26_year_span_is_analyzed_in_bounded_memory() -> None:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_LONG_SPAN)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    table, peak, mean, queued = done.stdout.split("\n")[0].split()
    # One end minute (shard 's' and '*'); at :30 of it the span and the 5 s call overlap.
    assert (table, peak, queued) == ("2", "2", "30")
    assert float(mean) == float(f"{(30 + 5) / 60:.12g}")  # 12 significant digits
    assert done.stdout.split("\n")[1] == "[2]"


@given(SPANS, st.booleans())
def test_minute_cells_are_the_busy_cells_of_minute_samples(
    spans: list[Span], from_steps: bool
) -> None:
    # What the seal uses: the (row, minute) cells with something in flight or queued, each
    # with the figures minute_samples gives it; every other cell is all zeros.
    events = _events(spans)
    if from_steps:
        with _built_from_steps():
            series = second_series(events)
    else:
        series = second_series(events)
    caps = {"a": 2, "b": 1}
    dense = minute_samples(series, caps)
    cells = concurrency.minute_cells(series, caps)
    busy = (dense.in_flight_max > 0) | (dense.queue_depth_max > 0)
    rows, minutes = np.nonzero(busy)
    assert cells.row.tolist() == rows.tolist()
    assert cells.minute_ns.tolist() == dense.minute_ns[minutes].tolist()
    for name in ("in_flight_mean", "in_flight_max", "queue_depth_mean", "queue_depth_max"):
        assert getattr(cells, name).tolist() == getattr(dense, name)[busy].tolist(), name
    quiet = ~busy
    for name in ("in_flight_mean", "in_flight_max", "queue_depth_mean", "queue_depth_max"):
        assert not getattr(dense, name)[quiet].any(), name
    rows_count = len(series.shard_ids) + 1
    assert (
        cells.queue_seconds.tolist() == dense.queue_seconds.reshape(rows_count, -1).sum(1).tolist()
    )
    assert cells.sag_seconds.tolist() == dense.sag_seconds.reshape(rows_count, -1).sum(1).tolist()
