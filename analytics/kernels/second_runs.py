"""Concurrency samples stored as runs of equal seconds (compiled loops, Numba).

In-flight and queue depth change only at the whole seconds where an attempt is admitted,
released or starts waiting, so a row's samples are a few *runs*: from a run's first
second to the next run's, both values are constant. Runs are what the concurrency figures
are computed from, so their cost follows the number of attempts and the minutes asked
for, never the seconds one interval covers (docs/metrics.md#concurrency).

Runs are built one of two ways, with the same result:

- :func:`dense_runs` from per-second arrays
  (:func:`~analytics.kernels.second_samples.window_samples`), when the grid is small next
  to the number of attempts (every ordinary run);
- :func:`sparse_runs` from the attempts' steps sorted by (row, second), when the grid is
  large: one attempt from 2000 to now is four steps, not 820 million samples.

Rows are the shards in code order, then the whole run (``'*'``).
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from tpmledger.compiled_kernels import kernels_ready

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]

_kernel = numba.njit(nogil=True, cache=True)

# Step kinds, the low two bits of a sparse step key.
_FLIGHT_UP, _FLIGHT_DOWN, _QUEUE_UP, _QUEUE_DOWN = 0, 1, 2, 3


@_kernel
def dense_runs(flight: Ints, depth: Ints, first: int) -> tuple[Ints, Ints, Ints, Ints]:
    """Runs of the (rows, seconds) arrays whose column 0 is epoch second ``first``.

    Returns ``(offsets, run_start, run_flight, run_depth)``: row ``r``'s runs are
    ``offsets[r]:offsets[r + 1]``; each row has a run starting at ``first``.
    """
    rows, width = flight.shape[0], flight.shape[1]
    offsets = np.zeros(rows + 1, np.int64)
    count = 0
    for row in range(rows):
        for column in range(width):
            if (
                column == 0
                or flight[row, column] != flight[row, column - 1]
                or depth[row, column] != depth[row, column - 1]
            ):
                count += 1
        offsets[row + 1] = count
    start = np.empty(count, np.int64)
    run_flight = np.empty(count, np.int64)
    run_depth = np.empty(count, np.int64)
    k = 0
    for row in range(rows):
        for column in range(width):
            if (
                column == 0
                or flight[row, column] != flight[row, column - 1]
                or depth[row, column] != depth[row, column - 1]
            ):
                start[k] = first + column
                run_flight[k] = flight[row, column]
                run_depth[k] = depth[row, column]
                k += 1
    return offsets, start, run_flight, run_depth


@_kernel
def sparse_steps(
    codes: Ints, began: Ints, ended: Ints, queued: Ints, first: int, last: int, rows: int
) -> Ints:
    """Every +1/−1 step of every row (``rows`` shards, then ``'*'``) as unsorted keys
    ``((row × width + second − first) × 4 + kind)``, from the attempts'
    :func:`~analytics.kernels.second_samples.sample_bounds` (a ``queued`` before the grid
    steps at its first second), as :func:`~analytics.kernels.second_samples.window_samples`
    counts them."""
    width = last - first
    total_row = rows
    keys = np.empty(8 * codes.size, np.int64)
    n = 0
    for i in range(codes.size):
        up = began[i] - first
        down = ended[i] - first
        waits = max(queued[i] - first, 0)
        for row in (codes[i], total_row):
            base = row * width
            if down > up:  # an attempt that ends before it starts is never in flight
                keys[n] = (base + up) * 4 + _FLIGHT_UP
                keys[n + 1] = (base + down) * 4 + _FLIGHT_DOWN
                n += 2
            if waits < up:
                keys[n] = (base + waits) * 4 + _QUEUE_UP
                keys[n + 1] = (base + up) * 4 + _QUEUE_DOWN
                n += 2
    return keys[:n]


@_kernel
def sparse_runs(
    sorted_keys: Ints, first: int, last: int, rows: int
) -> tuple[Ints, Ints, Ints, Ints]:
    """Runs of every row from sorted :func:`sparse_steps` keys (``rows`` counts ``'*'``).

    Returns what :func:`dense_runs` returns for the same samples.
    """
    width = last - first
    size = sorted_keys.size + rows
    start = np.empty(size, np.int64)
    run_flight = np.empty(size, np.int64)
    run_depth = np.empty(size, np.int64)
    offsets = np.zeros(rows + 1, np.int64)
    k, i = 0, 0
    for row in range(rows):
        start[k], run_flight[k], run_depth[k] = first, 0, 0
        k += 1
        flight, depth = 0, 0
        while i < sorted_keys.size and sorted_keys[i] // 4 // width == row:
            second = sorted_keys[i] // 4 % width
            while i < sorted_keys.size and sorted_keys[i] // 4 == row * width + second:
                kind = sorted_keys[i] % 4
                if kind == _FLIGHT_UP:
                    flight += 1
                elif kind == _FLIGHT_DOWN:
                    flight -= 1
                elif kind == _QUEUE_UP:
                    depth += 1
                else:
                    depth -= 1
                i += 1
            if second == 0:
                run_flight[k - 1], run_depth[k - 1] = flight, depth
            elif flight != run_flight[k - 1] or depth != run_depth[k - 1]:
                start[k], run_flight[k], run_depth[k] = first + second, flight, depth
                k += 1
        offsets[row + 1] = k
    return offsets, start[:k], run_flight[:k], run_depth[:k]


@_kernel
def _cell_walk(
    offsets: Ints,
    run_start: Ints,
    run_flight: Ints,
    run_depth: Ints,
    last: int,
    window_first: int,
    minutes: int,
    low: Floats,
    out: Ints,
    fill: bool,
) -> int:
    """One walk of :func:`run_minute_cells`: counts the cells (``fill`` False) or writes
    them into ``out`` (shape ``(8, cells)``: row, minute and the six figures)."""
    window_end = window_first + 60 * minutes
    n = 0
    for row in range(offsets.size - 1):
        current = -1  # the minute of this row's newest cell
        for k in range(offsets[row], offsets[row + 1]):
            flight, depth = run_flight[k], run_depth[k]
            if flight == 0 and depth == 0:
                continue  # adds nothing to any figure
            lo = max(run_start[k], window_first)
            hi = min(run_start[k + 1] if k + 1 < offsets[row + 1] else last, window_end)
            if lo >= hi:
                continue
            for minute in range((lo - window_first) // 60, (hi - 1 - window_first) // 60 + 1):
                if minute != current:
                    current = minute
                    n += 1
                    if fill:
                        out[0, n - 1], out[1, n - 1] = row, minute
                if not fill:
                    continue
                begin = window_first + 60 * minute
                seconds = min(hi, begin + 60) - max(lo, begin)
                c = n - 1
                out[2, c] += flight * seconds
                out[3, c] = max(out[3, c], flight)
                out[4, c] += depth * seconds
                out[5, c] = max(out[5, c], depth)
                if depth > 0:
                    out[6, c] += seconds
                    if flight < low[row]:
                        out[7, c] += seconds
    return n


@_kernel
def run_minute_cells(
    offsets: Ints,
    run_start: Ints,
    run_flight: Ints,
    run_depth: Ints,
    last: int,
    window_first: int,
    minutes: int,
    low: Floats,
) -> Ints:
    """Per (row, window minute) cell where some second has something in flight or queued:
    in-flight sum and max, queue depth sum and max, seconds with a queue, and those with
    in-flight < ``low[row]`` as well; only such cells (every other cell's figures are all 0).

    Returns an ``(8, cells)`` array: row, minute (index in the window), in-flight sum and
    max, queue depth sum and max, seconds with a queue, and of those the seconds with
    in-flight < ``low[row]``; cells in row then minute order. The cost is one step per run
    plus one per (busy run, window minute) it overlaps: seconds with nothing in flight and
    nothing queued cost nothing, however many minutes they cover.
    """
    empty = np.zeros((8, 0), np.int64)
    count = _cell_walk(
        offsets, run_start, run_flight, run_depth, last, window_first, minutes, low, empty, False
    )
    out = np.zeros((8, count), np.int64)
    _cell_walk(
        offsets, run_start, run_flight, run_depth, last, window_first, minutes, low, out, True
    )
    return out


def minute_cells_of_runs(
    offsets: Ints,
    run_start: Ints,
    run_flight: Ints,
    run_depth: Ints,
    last: int,
    window_first: int,
    minutes: int,
    low: Floats,
) -> Ints:
    """:func:`run_minute_cells`, or while this process waits for its kernels to be compiled
    (:mod:`tpmledger.compiled_kernels`: the live path at a worker's start) the same walk as
    plain Python: same cells, same figures."""
    if kernels_ready():
        return run_minute_cells(
            offsets, run_start, run_flight, run_depth, last, window_first, minutes, low
        )
    walk = _cell_walk.py_func
    empty = np.zeros((8, 0), np.int64)
    count = walk(
        offsets, run_start, run_flight, run_depth, last, window_first, minutes, low, empty, False
    )
    out = np.zeros((8, count), np.int64)
    walk(offsets, run_start, run_flight, run_depth, last, window_first, minutes, low, out, True)
    return out


def runs_of_samples(flight: Ints, depth: Ints, first: int) -> tuple[Ints, Ints, Ints, Ints]:
    """:func:`dense_runs`, as plain Python while the kernels are being compiled."""
    runs = dense_runs if kernels_ready() else dense_runs.py_func
    return runs(flight, depth, first)


@_kernel
def run_totals_before(
    offsets: Ints,
    run_start: Ints,
    run_flight: Ints,
    run_depth: Ints,
    last: int,
    until: int,
    low: Floats,
) -> tuple[Ints, Ints]:
    """Per row, over the grid's seconds before epoch second ``until``: seconds with a queue,
    and those with in-flight < ``low[row]`` as well (what the minute cells count, without
    a per-minute array: the seconds before a run's first minute can span years)."""
    rows = offsets.size - 1
    queued = np.zeros(rows, np.int64)
    sag = np.zeros(rows, np.int64)
    for row in range(rows):
        for k in range(offsets[row], offsets[row + 1]):
            if run_depth[k] <= 0:
                continue
            hi = min(run_start[k + 1] if k + 1 < offsets[row + 1] else last, until)
            if hi <= run_start[k]:
                continue
            queued[row] += hi - run_start[k]
            if run_flight[k] < low[row]:
                sag[row] += hi - run_start[k]
    return queued, sag
