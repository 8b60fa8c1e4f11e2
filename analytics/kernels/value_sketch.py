"""Mergeable per-minute summaries of a value (TTFT, latency): exact moments, sketched
percentiles (docs/metrics.md#live-approximations).

A live run's run-level percentiles cannot be kept exactly without holding every value,
so each live minute keeps a DDSketch (the ``ddsketch`` library's logarithmic mapping,
relative accuracy :data:`RELATIVE_ACCURACY`) next to the exact count, sum and sum of
squared deviations. Minutes merge by adding bins (sketch) and by Chan's parallel update
(moments), so the run's figures follow from its minutes alone.

A minute's summary is stored as a JSON object ``{"n", "sum", "m2", "zero", "offset",
"counts"}``: ``counts`` is base64 of little-endian int32 counts of the keys ``offset``,
``offset + 1``, … (the contiguous bins of DDSketch's dense store, as its protobuf
``Store.contiguousBinCounts``), ``zero`` the values too small to map (zero). Decoding and
merging a day of minutes is a few NumPy additions: the read API merges summaries on every
request for a live run.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from ddsketch import DDSketch
from ddsketch.mapping import LogarithmicMapping

#: The sketches' relative accuracy α: a sketched percentile is within α × the exact one.
RELATIVE_ACCURACY: Final = 0.01
MAPPING: Final = LogarithmicMapping(RELATIVE_ACCURACY)
# log2(v) × this, rounded up, is v's key (LogarithmicMapping.key, vectorizable).
KEY_MULTIPLIER: Final = MAPPING._multiplier
MIN_MAPPED: Final = MAPPING.min_possible


@dataclass(frozen=True)
class Summary:
    """Moments and DDSketch bins of some values (``counts[i]``: values of key offset + i)."""

    n: int
    total: float
    m2: float
    zero: int
    offset: int
    counts: npt.NDArray[np.int64]

    def as_json(self) -> dict[str, Any]:
        """The stored form (see the module docstring)."""
        packed = base64.b64encode(self.counts.astype("<i4").tobytes()).decode("ascii")
        return {"n": self.n, "sum": self.total, "m2": self.m2, "zero": self.zero,
                "offset": self.offset, "counts": packed}  # fmt: skip

    @classmethod
    def from_json(cls, stored: dict[str, Any]) -> Summary:
        counts = np.frombuffer(base64.b64decode(stored["counts"]), dtype="<i4").astype(np.int64)
        return cls(stored["n"], stored["sum"], stored["m2"], stored["zero"], stored["offset"],
                   counts)  # fmt: skip


def summary(
    total: float, m2: float, n: int, keys: npt.NDArray[np.int64], counts: npt.NDArray[np.int64]
) -> Summary:
    """A summary of ``n`` values: ``keys`` (sorted, distinct) and their ``counts`` are the
    mapped values' bins; the rest of the ``n`` are zeros."""
    if keys.size == 0:
        return Summary(n, total, m2, n, 0, np.zeros(0, np.int64))
    dense = np.zeros(int(keys[-1] - keys[0]) + 1, np.int64)
    dense[keys - keys[0]] = counts
    return Summary(n, total, m2, n - int(counts.sum()), int(keys[0]), dense)


def merged(stored: Iterable[dict[str, Any] | None]) -> Summary | None:
    """The summary of the union of the values of stored summaries (None when none holds
    a value): bins add, moments combine by Chan's parallel formula."""
    parts = [Summary.from_json(p) for p in stored if p and p["n"]]
    if not parts:
        return None
    n, total, m2, zero = 0, 0.0, 0.0, 0
    for part in parts:
        if n:
            delta = part.total / part.n - total / n
            m2 += part.m2 + delta * delta * n * part.n / (n + part.n)
        else:
            m2 = part.m2
        n, total, zero = n + part.n, total + part.total, zero + part.zero
    binned = [p for p in parts if p.counts.size]
    if not binned:
        return Summary(n, total, m2, zero, 0, np.zeros(0, np.int64))
    low = min(p.offset for p in binned)
    dense = np.zeros(max(p.offset + p.counts.size for p in binned) - low, np.int64)
    for part in binned:
        dense[part.offset - low : part.offset - low + part.counts.size] += part.counts
    return Summary(n, total, m2, zero, low, dense)


def as_sketch(part: Summary) -> DDSketch:
    """The summary's values as a ``ddsketch.DDSketch`` (same mapping, same bins)."""
    sketch = DDSketch(RELATIVE_ACCURACY)
    for i in np.flatnonzero(part.counts).tolist():
        sketch._store.add(part.offset + i, int(part.counts[i]))
    sketch._zero_count = float(part.zero)
    sketch._count = float(part.n)
    sketch._sum = float(part.total)
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


def figures(part: Summary | None, *, variance: bool) -> dict[str, Any]:
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
        "mean": part.total / part.n,
    }
    if variance:
        out["variance"] = max(part.m2, 0.0) / part.n
    return {**out, "approximate": True, "relative_accuracy": RELATIVE_ACCURACY}
