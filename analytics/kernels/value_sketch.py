"""Mergeable per-minute summaries of a value (TTFT, latency): exact moments, sketched
percentiles (docs/metrics.md#live-approximations).

A live run's run-level percentiles cannot be kept exactly without holding every value,
so each live minute keeps a DDSketch (Masson, Rim & Lee, VLDB 2019: the logarithmic
mapping of the ``ddsketch`` library, relative accuracy :data:`RELATIVE_ACCURACY`) next to
the exact count, sum and sum of squared deviations. The mapping and the rank lookup are
the few lines below, owned here rather than read from the library's private attributes;
tests/analytics/kernels/test_value_sketch.py checks them against ``ddsketch`` itself, so a
change there fails loudly instead of changing the stored bins' meaning. Minutes merge by
adding bins (sketch) and by Chan's parallel update (moments), so the run's figures follow
from its minutes alone.

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
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

#: The sketches' relative accuracy α: a sketched percentile is within α × the exact one.
RELATIVE_ACCURACY: Final = 0.01
# DDSketch's logarithmic mapping, computed as ddsketch's LogarithmicMapping does (same
# operations in the same order, so the same keys to the last bit): γ = (1 + α) / (1 − α);
# a value v > 0 has key ⌈log2(v) × KEY_MULTIPLIER⌉ and a key k stands for the value
# 2^(k / KEY_MULTIPLIER) × 2 / (1 + γ).
_GAMMA_MANTISSA: Final = 2 * RELATIVE_ACCURACY / (1 - RELATIVE_ACCURACY)
GAMMA: Final = 1 + _GAMMA_MANTISSA
KEY_MULTIPLIER: Final = (1 / math.log1p(_GAMMA_MANTISSA)) * math.log(2)
#: The smallest value the mapping tells from zero (smaller ones count as zeros).
MIN_MAPPED: Final = sys.float_info.min * GAMMA


def key(value: float) -> int:
    """The bin key of a value above :data:`MIN_MAPPED`."""
    return math.ceil(math.log(value, 2) * KEY_MULTIPLIER)


def key_value(bin_key: int) -> float:
    """The value a bin key stands for (within α of every value mapped to it)."""
    return math.pow(2.0, bin_key / KEY_MULTIPLIER) * (2.0 / (1 + GAMMA))


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


def quantile(part: Summary, q: float) -> float:
    """The q-quantile with linear interpolation between the two ranks around
    q × (n − 1), as the exact figures use; each rank's value is the sketch's (within α),
    so the interpolation is within α of the exact interpolated value too."""
    rank = q * (part.n - 1)
    low, high = math.floor(rank), math.ceil(rank)
    below = _value_at(part, low)
    if high == low:
        return below
    return below + (rank - low) * (_value_at(part, high) - below)


def _value_at(part: Summary, rank: int) -> float:
    """The value of the ``rank``-th smallest value (0-based): zero for the zeros, else the
    value of the first bin whose running count passes the rank (DDSketch's
    ``key_at_rank``)."""
    if rank < part.zero:
        return 0.0
    running = np.cumsum(part.counts)
    index = int(np.searchsorted(running, rank - part.zero, side="right"))
    return key_value(part.offset + min(index, part.counts.size - 1))


def figures(part: Summary | None, *, variance: bool) -> dict[str, Any]:
    """``{p50, p95, p99, mean[, variance], approximate, relative_accuracy}`` of a merged
    summary; the percentiles are sketched, mean and (population) variance exact."""
    keys = ("p50", "p95", "p99", "mean", *(("variance",) if variance else ()))
    if part is None:
        return {**dict.fromkeys(keys), "approximate": True, "relative_accuracy": None}
    out: dict[str, Any] = {
        "p50": quantile(part, 0.50),
        "p95": quantile(part, 0.95),
        "p99": quantile(part, 0.99),
        "mean": part.total / part.n,
    }
    if variance:
        out["variance"] = max(part.m2, 0.0) / part.n
    return {**out, "approximate": True, "relative_accuracy": RELATIVE_ACCURACY}
