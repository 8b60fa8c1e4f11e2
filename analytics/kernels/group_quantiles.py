"""Linear-interpolation percentiles, means and variances of many groups at once.

Polars' ``group_by(...).agg(quantile(...))`` selects within every group separately, once
per percentile; at a million attempts the minute table's percentiles were most of the
analytics time. Here a compiled counting sort lays every group's values out side by
side (:func:`~analytics.group_kernels.gather_by_group`), NumPy's SIMD sort orders each
group's slice in place, and each percentile is then a gather at computed positions.

The percentile arithmetic is Polars' own (``quantile_idx`` / ``linear_interpol`` in
polars-core, interpolation ``linear``), so results are bit-identical to ``quantile(q,
"linear")`` over the same group, nulls included: with ``nn`` values and ``nc`` nulls in a
group, ``float_idx = (nn - 1) * q + nc`` (nulls sort first), ``lower`` is the value at
``floor(float_idx)``, and unless that index is whole (or the neighbours are equal) the
result is ``(float_idx - floor) * (upper - lower) + lower``. A group without values has
no percentile (null in the tables). Tests compare against Polars on random groups.

Means and variances are summed over each group's *sorted* values, so they do not depend
on the order the events were read in (a seal reads the database, a re-verification reads
``events.jsonl`` in canonical order; both get the same bits).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tpmledger.analytics.kernels.group_kernels import gather_by_group, sorted_moments
from tpmledger.compiled_kernels import kernels_ready

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]
Bools = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class SortedGroups:
    """Every group's valid values, ascending, side by side.

    Group ``g``'s values are ``values[starts[g]:starts[g + 1]]``; ``nulls[g]`` counts
    its rows without a value (they matter to the percentile position, see above).
    """

    values: npt.NDArray[np.generic]
    starts: Ints
    nulls: Ints

    @property
    def counts(self) -> Ints:
        """Values per group."""
        return np.diff(self.starts)


def sort_groups(
    values: npt.NDArray[np.generic], valid: Bools, groups: Ints, group_count: int
) -> SortedGroups:
    """Group ``values`` where ``valid`` (``groups`` = 0..group_count-1 per row) and sort
    each group. NumPy's sort releases the GIL and is SIMD; one call per group."""
    gather = gather_by_group if kernels_ready() else gather_by_group.py_func
    ordered, starts, rows = gather(values, valid, groups, group_count)
    bounds = starts.tolist()
    for lo, hi in itertools.pairwise(bounds):
        if hi - lo > 1:
            ordered[lo:hi].sort()
    return SortedGroups(ordered, starts, rows - np.diff(starts))


def merged(groups: SortedGroups) -> SortedGroups:
    """All groups' values as one sorted group."""
    starts = np.array([0, groups.values.size], dtype=np.int64)
    return SortedGroups(np.sort(groups.values), starts, groups.nulls.sum(keepdims=True))


def concatenated(groups: SortedGroups) -> SortedGroups:
    """All groups' values as one group, group after group (sorted only within each):
    an order that does not depend on the input's, for sums."""
    starts = np.array([0, groups.values.size], dtype=np.int64)
    return SortedGroups(groups.values, starts, groups.nulls.sum(keepdims=True))


ToValues = Callable[[npt.NDArray[np.generic]], Floats]


def _as_floats(values: npt.NDArray[np.generic]) -> Floats:
    return np.asarray(values, dtype=np.float64)


def _at(values: npt.NDArray[np.generic], positions: Ints, to_values: ToValues) -> Floats:
    if values.size == 0:
        return np.zeros(positions.shape, dtype=np.float64)
    return to_values(values[np.clip(positions, 0, values.size - 1)])


def group_quantiles(
    groups: SortedGroups, quantiles: Sequence[float], to_values: ToValues | None = None
) -> tuple[list[Floats], Bools]:
    """Per group the requested percentiles, and which groups have a value (the others'
    entries are meaningless: null).

    ``to_values`` maps sorted values to the (non-decreasing) floats to interpolate,
    e.g. integer nanoseconds to seconds exactly as Polars divides; only the values at
    the percentile positions are mapped.
    """
    convert = to_values or _as_floats
    nn, nc = groups.counts, groups.nulls
    start = groups.starts[:-1]
    out: list[Floats] = []
    for q in quantiles:
        float_idx = (nn.astype(np.float64) - 1.0) * q + nc
        idx = np.floor(float_idx).astype(np.int64)
        top = np.ceil(float_idx).astype(np.int64)
        lower = _at(groups.values, start + idx - nc, convert)
        upper = _at(groups.values, start + idx + 1 - nc, convert)
        with np.errstate(invalid="ignore", over="ignore"):
            between = (float_idx - idx) * (upper - lower) + lower
        out.append(np.where((top == idx) | (lower == upper), lower, between))
    return out, nn > 0


def group_moments(
    groups: SortedGroups, to_values: ToValues | None = None, *, variance: bool = True
) -> tuple[Floats, Floats]:
    """Per group the mean and population variance (NaN for a group without values, and
    everywhere when ``variance`` is False)."""
    values = (to_values or _as_floats)(groups.values)
    # Until the worker's kernels are compiled, the plain loop (same arithmetic, same bits).
    moments = sorted_moments if kernels_ready() else sorted_moments.py_func
    means, variances = moments(values, groups.starts, variance)
    return means, variances
