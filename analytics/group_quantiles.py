"""Linear-interpolation percentiles of many groups at once, from one sort per grouping.

Polars' ``group_by(...).agg(quantile(...))`` selects within every group separately, once
per percentile; at a million attempts the minute table's 18 percentiles per (shard,
minute) and per minute were most of the analytics time. Here one value sort ranks the
values, and one integer sort of ``group * n + rank`` orders every group's values at once;
each percentile is then a gather at computed positions.

The arithmetic is Polars' own (``quantile_idx`` / ``linear_interpol`` in polars-core,
interpolation ``linear``), so results are bit-identical to ``quantile(q, "linear")``
over the same group, nulls included: with ``nn`` values and ``nc`` nulls in a group,
``float_idx = (nn - 1) * q + nc`` (nulls sort first), ``lower`` is the value at
``floor(float_idx)``, and unless that index is whole (or the neighbours are equal) the
result is ``(float_idx - floor) * (upper - lower) + lower``. A group without values
has no percentile (null in the tables). Tests compare against Polars on random groups.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class RankedValues:
    """Non-null values sorted once, and each value's rank in that order (ties share one)."""

    sorted_values: Floats
    ranks: Ints  # ranks[i] = position of values[i] in sorted_values (ties in any order)
    valid: Bools  # which input rows carry a value (the rest are nulls)


def _ranks(order: Ints) -> Ints:
    """Inverse permutation of an argsort: each value's position in sorted order."""
    ranks = np.empty(order.size, dtype=np.int64)
    ranks[order] = np.arange(order.size, dtype=np.int64)
    return ranks


def rank_values(values: Floats, valid: Bools) -> RankedValues:
    """Sort the valid values once and rank every valid value."""
    present = values[valid]
    order = np.argsort(present)
    return RankedValues(present[order], _ranks(order), valid)


def ranked_by_integers(keys: Ints, values: Floats) -> RankedValues:
    """Ranking of ``values`` (no nulls) through integer ``keys`` they grow with.

    E.g. latency seconds, as Polars computes ``(end_ns - start_ns) / 1e9``, ordered by
    the integer nanoseconds: integers sort faster than floats, and a positive scaling
    is monotonic, so ``values`` in key order are sorted. (Polars multiplies by the
    reciprocal, so the seconds are taken from Polars, not recomputed here.)
    """
    order = np.argsort(keys)
    valid = np.ones(keys.shape, dtype=np.bool_)
    return RankedValues(values[order], _ranks(order), valid)


def _at(values: Floats, positions: Ints) -> Floats:
    if values.size == 0:
        return np.zeros(positions.shape, dtype=np.float64)
    return values[np.clip(positions, 0, values.size - 1)]


def _from_sorted(
    ordered: Floats, start: Ints, nn: Ints, nc: Ints, quantiles: Sequence[float]
) -> list[Floats]:
    """Percentiles of groups whose values are ``ordered[start:start+nn]`` (ascending)."""
    out: list[Floats] = []
    for q in quantiles:
        float_idx = (nn.astype(np.float64) - 1.0) * q + nc
        idx = np.floor(float_idx).astype(np.int64)
        top = np.ceil(float_idx).astype(np.int64)
        lower = _at(ordered, start + idx - nc)
        upper = _at(ordered, start + idx + 1 - nc)
        with np.errstate(invalid="ignore", over="ignore"):
            between = (float_idx - idx) * (upper - lower) + lower
        out.append(np.where((top == idx) | (lower == upper), lower, between))
    return out


def grouped_quantiles(
    ranked: RankedValues, groups: Ints, group_count: int, quantiles: Sequence[float]
) -> tuple[list[Floats], Bools]:
    """Per group (``groups`` = 0..group_count-1 per input row) the requested percentiles.

    Also returns which groups have a value: the others' entries are meaningless (null).
    """
    n = ranked.sorted_values.size
    valid_groups = groups[ranked.valid]
    nn = np.bincount(valid_groups, minlength=group_count).astype(np.int64)
    nc = np.bincount(groups[~ranked.valid], minlength=group_count).astype(np.int64)
    # One integer sort orders every group's values: group-major, then by value rank.
    keys = valid_groups * max(n, 1) + ranked.ranks
    keys.sort()
    ordered = ranked.sorted_values[keys % max(n, 1)] if n else ranked.sorted_values
    start = np.zeros(group_count, dtype=np.int64)
    np.cumsum(nn[:-1], out=start[1:])
    return _from_sorted(ordered, start, nn, nc, quantiles), nn > 0


def grouped_integer_quantiles(
    keys: Ints,
    groups: Ints,
    group_count: int,
    quantiles: Sequence[float],
    to_values: Callable[[Ints], Floats],
) -> tuple[list[Floats], Bools] | None:
    """Percentiles per group of values given by non-negative integer ``keys`` (no nulls).

    ``to_values`` maps sorted keys to the (non-decreasing) values, e.g. nanoseconds to
    seconds exactly as Polars divides. No ranking is needed: ``group * span + key`` is
    sorted once. None when a key is negative or the combined key could overflow (the
    caller then ranks the values instead).
    """
    span = int(keys.max()) + 1 if keys.size else 1
    if keys.size and (int(keys.min()) < 0 or group_count * span >= 2**62):
        return None
    combined = groups * span + keys
    combined.sort()
    nn = np.bincount(groups, minlength=group_count).astype(np.int64)
    start = np.zeros(group_count, dtype=np.int64)
    np.cumsum(nn[:-1], out=start[1:])
    nc = np.zeros(group_count, dtype=np.int64)
    return _from_sorted(to_values(combined % span), start, nn, nc, quantiles), nn > 0


def overall_quantiles(ranked: RankedValues, quantiles: Sequence[float]) -> list[float | None]:
    """The percentiles of all values (None when there is none)."""
    nn = np.array([ranked.sorted_values.size], dtype=np.int64)
    nc = np.array([int((~ranked.valid).sum())], dtype=np.int64)
    values = _from_sorted(ranked.sorted_values, np.zeros(1, np.int64), nn, nc, quantiles)
    return [float(v[0]) if nn[0] else None for v in values]
