"""Concurrency at 1-second resolution from span intervals (docs/metrics.md).

An attempt span covers the time its shard held a concurrency slot (start = admitted,
end = released); ``queued_at = start − queue_wait_s`` (docs/conventions.md). Both series are
*sampled at every whole second* t: in-flight(t) = attempts with start ≤ t < end,
queue depth(t) = attempts with queued_at ≤ t < start (only attempts that report
``queue_wait_s``). Sampled counts are integers and never exceed a slot cap that was
enforced, which is what the work-conserving check compares against.

With whole-second sample instants t, ``start <= t`` is ``ceil(start / 1 s) <= t``, so a
series is a running sum of +1/−1 steps at ceil-seconds. The samples are kept as runs of
equal seconds (:mod:`analytics.kernels.second_runs`) over the grid of whole minutes from one
minute before the earliest queued_at (a wait counts for at most
:data:`MAX_QUEUE_WAIT_S`) to one minute after the last end. Minute figures are computed
for a *window* of minutes only (the minute table's, by default): no cost grows with the
seconds one interval covers, only with attempts and the minutes asked for
(docs/metrics.md#concurrency).

Work-conserving check: among (shard, second) samples whose queue depth is > 0 on a shard
with a known cap, the share where in-flight < 0.9 × that shard's cap is the "sag"; the
check passes at ≤ 5 %. It is not measured (null) without queue data or caps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt
import polars as pl

from tpmledger.analytics.kernels.event_grid import EventGrid, event_grid
from tpmledger.analytics.kernels.figure_registry import figure
from tpmledger.analytics.kernels.figure_rules import (
    SAG_FRACTION_OF_CAP,
    SAG_PASS_SHARE,
)
from tpmledger.analytics.kernels.group_kernels import second_grid
from tpmledger.analytics.kernels.second_runs import (
    dense_runs,
    minute_cells_of_runs,
    run_totals_before,
    runs_of_samples,
    sparse_runs,
    sparse_steps,
)
from tpmledger.analytics.kernels.second_samples import sample_bounds, window_samples
from tpmledger.durations import SECOND_NS

__all__ = [
    "SAG_FRACTION_OF_CAP",
    "SAG_PASS_SHARE",
    "MinuteCells",
    "SecondSeries",
    "minute_cells",
    "sampled_series",
    "second_series",
    "seconds_before",
]

# Queue samples reach back at most this far before the first start (bounds the grid).
MAX_QUEUE_WAIT_S = 86_400.0
# Per-second arrays are built (then turned into runs) only while the grid has at most
# this many cells per attempt, plus a floor; larger grids are built from sorted steps.
# Both give the same runs; the arrays are faster for ordinary runs.
DENSE_CELLS_PER_ATTEMPT: Final = 8
DENSE_CELLS_FLOOR: Final = 1 << 21

Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class SecondSeries:
    """Per-second samples of every shard (code order) and the whole run, as runs.

    Row ``r`` (shards, then ``'*'`` last) has runs ``offsets[r]:offsets[r + 1]``: from
    ``run_start[k]`` (epoch second) to the next run's start, or ``last_second``, the
    samples are ``run_in_flight[k]`` and ``run_queue_depth[k]``.
    """

    shard_ids: tuple[str, ...]
    first_second: int  # the grid: whole minutes [first_second, last_second)
    last_second: int
    offsets: Ints
    run_start: Ints
    run_in_flight: Ints
    run_queue_depth: Ints
    queue_shards: frozenset[str]
    window_first_second: int  # the minutes figures are computed for (within the grid)
    window_minutes: int


def second_series(
    events: pl.DataFrame,
    grid: EventGrid | None = None,
    *,
    window: tuple[int, int] | None = None,
) -> SecondSeries:
    """In-flight and queue depth per shard and second, for minute figures of ``window``.

    ``window`` is ``(first_minute_ns, minute_count)``; by default the minutes of the
    minute table (``grid``: the run's first to last end-time minute).
    """
    grid = grid if grid is not None else event_grid(events)
    if window is None:
        window = (grid.first_minute_ns, grid.minute_count)
    rows = grid.shard_count
    if events.height == 0:
        none = np.zeros(0, dtype=np.int64)
        offsets = np.zeros(rows + 2, dtype=np.int64)
        return SecondSeries(grid.shard_ids, 0, 0, offsets, none, none, none, frozenset(), 0, 0)
    wait_column = events.get_column("queue_wait_s")
    start = events.get_column("start_ns").to_numpy()
    end = events.get_column("end_ns").to_numpy()
    wait = wait_column.fill_null(-1.0).to_numpy()  # negative: no queue
    reported = wait_column.is_not_null().to_numpy()
    first, last = second_grid(start, end, wait, MAX_QUEUE_WAIT_S)
    began, ended, queued = sample_bounds(start, end, wait)
    codes = grid.shard_codes
    if (rows + 1) * (last - first) <= DENSE_CELLS_PER_ATTEMPT * events.height + DENSE_CELLS_FLOOR:
        flight = window_samples(codes, began, ended, rows, first, last - first)
        depth = window_samples(codes, queued, began, rows, first, last - first)
        runs = dense_runs(_with_whole_run(flight), _with_whole_run(depth), first)
    else:
        keys = sparse_steps(codes, began, ended, queued, first, last, rows)
        keys.sort()
        runs = sparse_runs(keys, first, last, rows + 1)
    reporting = np.bincount(codes[reported], minlength=rows)
    queue_shards = frozenset(s for s, n in zip(grid.shard_ids, reporting, strict=True) if n)
    window_first = max(window[0] // SECOND_NS, first)
    window_last = min(window[0] // SECOND_NS + 60 * window[1], last)
    return SecondSeries(
        grid.shard_ids,
        first,
        last,
        *runs,
        queue_shards,
        window_first,
        max(window_last - window_first, 0) // 60,
    )


def _with_whole_run(samples: Ints) -> Ints:
    """The shards' samples and, in a last row, their sum (the whole run's)."""
    return np.vstack([samples, samples.sum(axis=0, keepdims=True)])


def sampled_series(
    shard_ids: tuple[str, ...], flight: Ints, depth: Ints, first_second: int
) -> SecondSeries:
    """The series of samples already taken: ``flight`` and ``depth`` are ``(rows + 1,
    60 × minutes)`` arrays (the shards in ``shard_ids`` order, then ``'*'``) whose column 0
    is epoch second ``first_second``, a whole minute; the window is all of their minutes.
    The live path keeps a minute's samples so (:mod:`analytics.live.minute_state`) and
    gives them to :func:`minute_cells` like the seal's."""
    width = int(flight.shape[1])
    offsets, start, run_flight, run_depth = runs_of_samples(
        np.ascontiguousarray(flight, dtype=np.int64),
        np.ascontiguousarray(depth, dtype=np.int64),
        first_second,
    )
    return SecondSeries(
        shard_ids,
        first_second,
        first_second + width,
        offsets,
        start,
        run_flight,
        run_depth,
        frozenset(),
        first_second,
        width // 60,
    )


def sag_below(series: SecondSeries, caps: Mapping[str, int | None]) -> npt.NDArray[np.float64]:
    """Per row: in-flight below this counts as sag (0: never; the '*' row never)."""
    below = [SAG_FRACTION_OF_CAP * float(caps.get(s) or 0) for s in series.shard_ids]
    return np.array([*below, 0.0], dtype=np.float64)


@dataclass(frozen=True)
class MinuteCells:
    """In-flight and queue depth mean/max of the (row, minute) cells where something was in
    flight or queued at some second: every other cell of the window has all four figures 0
    (and no queued or sagging seconds). Rows are the shards in code order, then ``'*'``."""

    row: Ints  # per cell, in row then minute order
    minute_ns: Ints
    in_flight_mean: npt.NDArray[np.float64]
    in_flight_max: Ints
    queue_depth_mean: npt.NDArray[np.float64]
    queue_depth_max: Ints
    queue_seconds: Ints  # per row (row '*': 0)
    sag_seconds: Ints  # per row


@figure("minute_concurrency")
def minute_cells(series: SecondSeries, caps: Mapping[str, int | None]) -> MinuteCells:
    """In-flight and queue depth mean/max of every window minute, and per shard the seconds
    with a queue and those that sagged below 0.9 × ``caps`` (unknown cap: none), for the cells
    where something is in flight or queued only:
    the work and memory follow the busy seconds' minutes, not rows × window minutes.

    The one formula of a minute's concurrency figures: the seal gives it the series of a
    chunk (:func:`second_series`), the live path one minute's kept samples
    (:func:`sampled_series`)."""
    low = sag_below(series, caps)
    cells = minute_cells_of_runs(
        series.offsets,
        series.run_start,
        series.run_in_flight,
        series.run_queue_depth,
        series.last_second,
        series.window_first_second,
        series.window_minutes,
        low,
    )
    rows = low.size
    queued = np.zeros(rows, dtype=np.int64)
    sag = np.zeros(rows, dtype=np.int64)
    np.add.at(queued, cells[0], cells[6])
    np.add.at(sag, cells[0], cells[7])
    queued[-1] = 0
    return MinuteCells(
        row=cells[0],
        minute_ns=(series.window_first_second + 60 * cells[1]) * SECOND_NS,
        in_flight_mean=cells[2] / 60,
        in_flight_max=cells[3],
        queue_depth_mean=cells[4] / 60,
        queue_depth_max=cells[5],
        queue_seconds=queued,
        sag_seconds=sag,
    )


def seconds_before(
    series: SecondSeries, until_second: int, caps: Mapping[str, int | None]
) -> tuple[Ints, Ints]:
    """Per row (shards, then ``'*'``: 0), the seconds before epoch second ``until_second``
    with a queue, and of those the seconds in-flight sagged below 0.9 × ``caps`` (what the
    work-conserving check counts before the first minute a seal samples)."""
    queued, sag = run_totals_before(
        series.offsets,
        series.run_start,
        series.run_in_flight,
        series.run_queue_depth,
        series.last_second,
        until_second,
        sag_below(series, caps),
    )
    queued[-1] = 0
    return queued, sag
