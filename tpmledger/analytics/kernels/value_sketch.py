"""Mergeable per-minute summaries of a value (TTFT, latency): exact moments, sketched
percentiles (docs/metrics.md#live-approximations).

A live run's run-level percentiles cannot be kept exactly without holding every value,
so each live minute keeps a DDSketch (the ``ddsketch`` library's logarithmic mapping,
relative accuracy :data:`RELATIVE_ACCURACY`) next to the exact count, sum and sum of
squared deviations. Minutes merge by adding bins (sketch) and by Chan's parallel update
(moments), so the run's figures follow from its minutes alone.

A summary is a plain dict (stored as JSON): ``{"n", "sum", "m2", "zero", "offset",
"bins"}`` where ``bins[i]`` counts the values of key ``offset + i`` (the contiguous bins
of DDSketch's dense store, as its protobuf ``Store.contiguousBinCounts``) and ``zero`` the
values too small to map (zero). Light on purpose: the read API merges summaries.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Final

from ddsketch import DDSketch
from ddsketch.mapping import LogarithmicMapping

#: The sketches' relative accuracy α: a sketched percentile is within α × the exact one.
RELATIVE_ACCURACY: Final = 0.01
MAPPING: Final = LogarithmicMapping(RELATIVE_ACCURACY)
# log2(v) × this, rounded up, is v's key (LogarithmicMapping.key, vectorizable).
KEY_MULTIPLIER: Final = MAPPING._multiplier
MIN_MAPPED: Final = MAPPING.min_possible


def summary(n: int, total: float, m2: float, zero: int, keys: dict[int, int]) -> dict[str, Any]:
    """A summary from its parts (``keys``: key -> count of the mapped values)."""
    if not keys:
        return {"n": n, "sum": total, "m2": m2, "zero": zero, "offset": 0, "bins": []}
    low, high = min(keys), max(keys)
    bins = [0] * (high - low + 1)
    for key, count in keys.items():
        bins[key - low] = count
    return {"n": n, "sum": total, "m2": m2, "zero": zero, "offset": low, "bins": bins}


def merged(summaries: Iterable[dict[str, Any] | None]) -> dict[str, Any] | None:
    """The summary of the union of the values (None when no summary holds a value)."""
    n, total, m2, zero = 0, 0.0, 0.0, 0
    keys: dict[int, int] = {}
    for part in summaries:
        if not part or not part["n"]:
            continue
        pn, psum, pm2 = part["n"], part["sum"], part["m2"]
        if n:
            delta = psum / pn - total / n
            m2 += pm2 + delta * delta * n * pn / (n + pn)
        else:
            m2 = pm2
        n, total, zero = n + pn, total + psum, zero + part["zero"]
        offset = part["offset"]
        for i, count in enumerate(part["bins"]):
            if count:
                keys[offset + i] = keys.get(offset + i, 0) + count
    return summary(n, total, m2, zero, keys) if n else None


def as_sketch(part: dict[str, Any]) -> DDSketch:
    """The summary's values as a ``ddsketch.DDSketch`` (same mapping, same bins)."""
    sketch = DDSketch(RELATIVE_ACCURACY)
    offset = part["offset"]
    for i, count in enumerate(part["bins"]):
        if count:
            sketch._store.add(offset + i, count)
    sketch._zero_count = float(part["zero"])
    sketch._count = float(part["n"])
    sketch._sum = float(part["sum"])
    return sketch


def quantile(sketch: DDSketch, q: float) -> float:
    """The q-quantile with linear interpolation between the two ranks around
    q × (n − 1), as the exact figures use; each rank's value is the sketch's (within α),
    so the interpolation is within α of the exact interpolated value too."""
    rank = q * (sketch.count - 1)
    low, high = math.floor(rank), math.ceil(rank)
    below = _value_at(sketch, low)
    if high == low:
        return below
    return below + (rank - low) * (_value_at(sketch, high) - below)


def _value_at(sketch: DDSketch, rank: int) -> float:
    if rank < sketch._zero_count:
        return 0.0
    return float(sketch._mapping.value(sketch._store.key_at_rank(rank - sketch._zero_count)))


def figures(part: dict[str, Any] | None, *, variance: bool) -> dict[str, Any]:
    """``{p50, p95, p99, mean[, variance], approximate, relative_accuracy}`` of a merged
    summary; the percentiles are sketched, mean and (population) variance exact."""
    keys = ("p50", "p95", "p99", "mean", *(("variance",) if variance else ()))
    if part is None:
        return {**dict.fromkeys(keys), "approximate": True, "relative_accuracy": None}
    sketch = as_sketch(part)
    out: dict[str, Any] = {
        "p50": quantile(sketch, 0.50),
        "p95": quantile(sketch, 0.95),
        "p99": quantile(sketch, 0.99),
        "mean": part["sum"] / part["n"],
    }
    if variance:
        out["variance"] = max(part["m2"], 0.0) / part["n"]
    return {**out, "approximate": True, "relative_accuracy": RELATIVE_ACCURACY}
