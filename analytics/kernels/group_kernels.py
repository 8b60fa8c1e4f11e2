"""Compiled one-pass loops over events grouped by dense integer codes (Numba).

Each loop here visits every event once; NumPy and Polars would need one pass (and one
temporary array) per figure for the same work. Sorting stays with NumPy, whose SIMD
sort of a group's slice is several times faster than a compiled loop's sort.

Kernels are compiled on first use and cached on disk (``cache=True``), and release the
GIL (``nogil=True``) so they run beside Polars work in other threads.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from tpmledger.durations import SECOND_NS

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]


_kernel = numba.njit(nogil=True, cache=True)


@_kernel
def gather_by_group(
    values: npt.NDArray[np.generic], valid: Bools, groups: Ints, count: int
) -> tuple[npt.NDArray[np.generic], Ints, Ints]:
    """The valid ``values`` group by group (input order kept within a group).

    Returns ``(out, starts, rows)``: group ``g``'s values are ``out[starts[g]:starts[g + 1]]``
    and ``rows[g]`` counts its rows, valid or not. A counting sort: one pass counts, one
    pass places.
    """
    starts = np.zeros(count + 1, np.int64)
    rows = np.zeros(count, np.int64)
    for i in range(groups.size):
        g = groups[i]
        rows[g] += 1
        if valid[i]:
            starts[g + 1] += 1
    for g in range(count):
        starts[g + 1] += starts[g]
    fill = starts[:-1].copy()
    out = np.empty(starts[count], values.dtype)
    for i in range(groups.size):
        if valid[i]:
            g = groups[i]
            out[fill[g]] = values[i]
            fill[g] += 1
    return out, starts, rows


@_kernel
def group_totals(
    groups: Ints, count: int, prompt: Ints, completion: Ints, ok: Bools, retry: Bools
) -> Ints:
    """Per group: rows, prompt and completion token sums, successes and retries.

    Columns of the ``(count, 5)`` result in that order; integer sums are exact.
    """
    out = np.zeros((count, 5), np.int64)
    for i in range(groups.size):
        g = groups[i]
        out[g, 0] += 1
        out[g, 1] += prompt[i]
        out[g, 2] += completion[i]
        out[g, 3] += ok[i]
        out[g, 4] += retry[i]
    return out


@_kernel
def sorted_moments(
    values: Floats, starts: Ints, with_variance: bool = True
) -> tuple[Floats, Floats]:
    """Mean and population variance of every group of ``values[starts[g]:starts[g+1]]``.

    Groups come sorted, so the summation order (and so every bit of the result) does
    not depend on the order events were read in. Both sums are compensated (Neumaier);
    a group without values gets NaN.
    """
    count = starts.size - 1
    mean = np.full(count, np.nan)
    variance = np.full(count, np.nan)
    for g in range(count):
        lo, hi = starts[g], starts[g + 1]
        if hi == lo:
            continue
        total, carry = 0.0, 0.0
        for j in range(lo, hi):
            x = values[j]
            t = total + x
            if abs(total) >= abs(x):
                carry += (total - t) + x
            else:
                carry += (x - t) + total
            total = t
        m = (total + carry) / (hi - lo)
        mean[g] = m
        if not with_variance:
            continue
        total, carry = 0.0, 0.0
        for j in range(lo, hi):
            d = values[j] - m
            x = d * d
            t = total + x
            if total >= x:
                carry += (total - t) + x
            else:
                carry += (x - t) + total
            total = t
        variance[g] = (total + carry) / (hi - lo)
    return mean, variance


@_kernel
def ceil_second(ns: int) -> int:
    """The epoch second ``ceil(ns / 1 s)``."""
    return -((-ns) // SECOND_NS)


@_kernel
def second_grid(start_ns: Ints, end_ns: Ints, wait_s: Floats, max_wait_s: float) -> tuple[int, int]:
    """Epoch seconds ``[first, last)`` of the per-second grid of these attempts.

    Whole minutes from one minute before the earliest ``start − min(wait, max_wait_s)``
    (``wait_s`` negative: no queue) to one minute after the last end, or the last start
    when an attempt ends before it starts: every step
    :func:`~analytics.kernels.second_runs.sparse_steps` places falls inside the grid,
    whatever the input (the loop does not check indexes), and
    :func:`~analytics.kernels.second_samples.window_samples` counts every sample.
    """
    lo, hi = float(start_ns[0]), max(start_ns[0], end_ns[0])
    for i in range(start_ns.size):
        wait = min(wait_s[i], max_wait_s) if wait_s[i] >= 0 else 0.0
        lo = min(lo, start_ns[i] - wait * SECOND_NS)
        hi = max(hi, end_ns[i], start_ns[i])
    return int(lo) // SECOND_NS // 60 * 60 - 60, ceil_second(hi) // 60 * 60 + 60


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: top bits of key * golden


@_kernel
def _slot(key: np.uint64, shift: np.uint64) -> np.uint64:
    return (key * _GOLDEN) >> shift


@_kernel
def in_set(keys: npt.NDArray[np.uint64], members: npt.NDArray[np.uint64]) -> Bools:
    """Which ``keys`` are among ``members`` (a small open-addressing set: a few members
    probed a million times stay in cache, unlike a table of every key)."""
    bits = 4
    while (1 << bits) < 2 * members.size:
        bits += 1
    size, shift = 1 << bits, np.uint64(64 - bits)
    table = np.zeros(size, np.uint64)
    used = np.zeros(size, np.bool_)
    for key in members:
        slot = _slot(key, shift)
        while used[slot] and table[slot] != key:
            slot = (slot + np.uint64(1)) & np.uint64(size - 1)
        table[slot] = key
        used[slot] = True
    out = np.zeros(keys.size, np.bool_)
    if members.size == 0:
        return out
    for i in range(keys.size):
        key = keys[i]
        slot = _slot(key, shift)
        while used[slot]:
            if table[slot] == key:
                out[i] = True
                break
            slot = (slot + np.uint64(1)) & np.uint64(size - 1)
    return out


MAX_DENSE_CODES = 128


@_kernel
def dense_codes(keys: npt.NDArray[np.uint64]) -> tuple[Ints, Ints]:
    """A code per distinct key, in order of first appearance, and each code's first row.

    Empty arrays when there are more than :data:`MAX_DENSE_CODES` distinct keys.
    """
    bits = 8  # a table of 256 slots, at most half full
    size, shift = 1 << bits, np.uint64(64 - bits)
    codes = np.empty(keys.size, np.int64)
    firsts = np.empty(MAX_DENSE_CODES, np.int64)
    table_keys = np.zeros(size, np.uint64)
    table_codes = np.full(size, -1, np.int64)
    distinct = 0
    for i in range(keys.size):
        key = keys[i]
        slot = _slot(key, shift)
        while table_codes[slot] != -1 and table_keys[slot] != key:
            slot = (slot + np.uint64(1)) & np.uint64(size - 1)
        if table_codes[slot] == -1:
            if distinct == MAX_DENSE_CODES:
                return np.empty(0, np.int64), np.empty(0, np.int64)
            table_keys[slot] = key
            table_codes[slot] = distinct
            firsts[distinct] = i
            distinct += 1
        codes[i] = table_codes[slot]
    return codes, firsts[:distinct]
