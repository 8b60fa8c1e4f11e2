"""Concurrency samples of every (row, window minute) cell, dense: the per-minute arrays the
product computed before a shard's empty minutes became implicit. The product samples only
busy cells (:func:`tpmledger.analytics.kernels.concurrency.minute_cells`); the whole-run
oracle and the live-window reference sample every cell with this, and
tests/analytics/kernels/test_concurrency.py checks the busy cells agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numba
import numpy as np
import numpy.typing as npt

from tpmledger.analytics.kernels.concurrency import SecondSeries, sag_below
from tpmledger.durations import SECOND_NS

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
_kernel = numba.njit(nogil=True, cache=True)


@dataclass(frozen=True)
class MinuteSamples:
    """Minute figures of the window, one row per shard and a last row for ``'*'``."""

    minute_ns: Ints
    in_flight_mean: npt.NDArray[np.float64]  # shape (rows, minutes)
    in_flight_max: Ints
    queue_depth_mean: npt.NDArray[np.float64]
    queue_depth_max: Ints
    queue_seconds: Ints  # seconds with a queue (row '*': 0)
    sag_seconds: Ints  # of those, seconds with in-flight < 0.9 × the shard's cap


@_kernel
def run_minutes(
    offsets: Ints,
    run_start: Ints,
    run_flight: Ints,
    run_depth: Ints,
    last: int,
    window_first: int,
    minutes: int,
    low: Floats,
) -> tuple[Ints, Ints, Ints, Ints, Ints, Ints]:
    """Per row and minute of the window (``minutes`` from epoch second ``window_first``,
    inside the grid): in-flight sum and max (at least 0), queue depth sum and max, seconds
    with a queue, and seconds with a queue while in-flight < ``low[row]``.

    Sums are exact integers (a minute's mean is the sum / 60). The cost is one step per
    run plus one per (run, window minute) it overlaps.
    """
    rows = offsets.size - 1
    flight_sum = np.zeros((rows, minutes), np.int64)
    flight_max = np.zeros((rows, minutes), np.int64)
    depth_sum = np.zeros((rows, minutes), np.int64)
    depth_max = np.zeros((rows, minutes), np.int64)
    queued = np.zeros((rows, minutes), np.int64)
    sag = np.zeros((rows, minutes), np.int64)
    window_end = window_first + 60 * minutes
    for row in range(rows):
        for k in range(offsets[row], offsets[row + 1]):
            lo = max(run_start[k], window_first)
            hi = min(run_start[k + 1] if k + 1 < offsets[row + 1] else last, window_end)
            if lo >= hi:
                continue
            flight, depth = run_flight[k], run_depth[k]
            for minute in range((lo - window_first) // 60, (hi - 1 - window_first) // 60 + 1):
                begin = window_first + 60 * minute
                seconds = min(hi, begin + 60) - max(lo, begin)
                flight_sum[row, minute] += flight * seconds
                flight_max[row, minute] = max(flight_max[row, minute], flight)
                depth_sum[row, minute] += depth * seconds
                depth_max[row, minute] = max(depth_max[row, minute], depth)
                if depth > 0:
                    queued[row, minute] += seconds
                    if flight < low[row]:
                        sag[row, minute] += seconds
    return flight_sum, flight_max, depth_sum, depth_max, queued, sag


def minute_samples(series: SecondSeries, caps: Mapping[str, int | None]) -> MinuteSamples:
    """In-flight and queue depth mean/max of every window minute, and per shard the
    seconds with a queue and those that sagged below 0.9 × ``caps`` (unknown cap: none)."""
    flight_sum, flight_max, depth_sum, depth_max, queued, sag = run_minutes(
        series.offsets,
        series.run_start,
        series.run_in_flight,
        series.run_queue_depth,
        series.last_second,
        series.window_first_second,
        series.window_minutes,
        sag_below(series, caps),
    )
    queued[-1] = 0
    minutes = np.arange(series.window_minutes, dtype=np.int64)
    return MinuteSamples(
        minute_ns=(series.window_first_second + 60 * minutes) * SECOND_NS,
        in_flight_mean=flight_sum / 60,
        in_flight_max=flight_max,
        queue_depth_mean=depth_sum / 60,
        queue_depth_max=depth_max,
        queue_seconds=queued,
        sag_seconds=sag,
    )
