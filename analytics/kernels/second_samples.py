"""In-flight and queue depth sampled at whole seconds: the one formula of the samples
(docs/metrics.md#concurrency, docs/architecture.md#one-formula).

An attempt is in flight at whole second t when ``start ≤ t < end`` and queued when
``queued_at ≤ t < start`` (``queued_at = start − queue_wait_s``, the wait rounded to a whole
nanosecond half to even, as Polars' ``round()``). With whole-second instants, ``x ≤ t`` is
``ceil(x / 1 s) ≤ t``: :func:`sample_bounds` turns each attempt into the seconds where its
samples step, and :func:`window_samples` counts, per row, the attempts whose ``[low, high)``
covers each second of a window. The seal (a chunk's grid,
:mod:`analytics.kernels.concurrency`; the sealed target saturation,
:mod:`analytics.verdicts.run_diagnostics`) and the live path (a minute's 60 samples,
:mod:`analytics.live.minute_state`) both call these two, on the rows each holds.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from tpmledger.analytics.kernels.figure_registry import figure
from tpmledger.durations import SECOND_NS

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]

#: A queue wait this long (in ns) reaches before any grid: it is queued from the grid's start.
LONGEST_WAIT_NS: Final = 2.0**62
#: The ``queued`` second of such a wait: before every window, never overflowing a subtraction.
FAR_BEFORE: Final = np.iinfo(np.int64).min // 2


def ceil_seconds(ns: Ints) -> Ints:
    """The epoch seconds ``ceil(ns / 1 s)``."""
    return -((-ns) // SECOND_NS)


@figure("second_sample_bounds")
def sample_bounds(
    start_ns: Ints, end_ns: Ints, wait_s: Floats | None = None
) -> tuple[Ints, Ints, Ints]:
    """Per attempt, ``(began, ended, queued)``: the whole seconds ceil(start), ceil(end) and
    ceil(queued_at). It is in flight at the seconds ``[began, ended)`` (none when it ends
    before it starts) and queued at ``[queued, began)``: empty (``queued`` is ``began``)
    without a queue wait (``wait_s`` None, negative or NaN), and from :data:`FAR_BEFORE`
    when the wait reaches before any grid."""
    began = ceil_seconds(start_ns)
    ended = ceil_seconds(end_ns)
    if wait_s is None:
        return began, ended, began
    queued = began.copy()
    waits = np.flatnonzero(wait_s >= 0)  # only these divide again
    waited = np.rint(wait_s[waits] * SECOND_NS)  # half to even
    far = waited >= LONGEST_WAIT_NS
    at = ceil_seconds(start_ns[waits] - np.where(far, 0.0, waited).astype(np.int64))
    queued[waits] = np.where(far, FAR_BEFORE, at)
    return began, ended, queued


@figure("second_samples")
def window_samples(codes: Ints, low: Ints, high: Ints, rows: int, first: int, width: int) -> Ints:
    """Per row ``0 … rows − 1`` (attempt ``i`` counts in row ``codes[i]``), how many attempts
    have ``low ≤ t < high`` at each second t of ``[first, first + width)``: an
    ``(rows, width)`` array. Intervals are clipped to the window (a ``low`` before it counts
    from its first second); an empty one counts nowhere. One +1/−1 step per bound, one
    running sum per row: the work follows the attempts and the window's cells."""
    a = np.clip(low, first, first + width) - first
    b = np.clip(high, first, first + width) - first
    hit = a < b
    base = codes[hit] * (width + 1)
    cells = rows * (width + 1)
    steps = np.bincount(base + a[hit], minlength=cells)
    steps -= np.bincount(base + b[hit], minlength=cells)
    samples: Ints = np.cumsum(steps.reshape(rows, width + 1), axis=1)[:, :width]
    return samples
