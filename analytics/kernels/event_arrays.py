"""The per-event inputs of the figures, as NumPy arrays (one Polars select).

What docs/metrics.md derives per event (``ok``, tokens with absent = 0, latency, TTFT of
successful attempts, ``is_retry``) is computed once by the prepared plan of
:mod:`analytics.kernels.event_plans` and handed to the compiled group loops as flat arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl

from tpmledger.analytics.kernels.event_plans import prepared_events
from tpmledger.durations import SECOND_NS

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]

# Polars computes ``int_column / 1e9`` as a multiplication by the reciprocal (its
# vectorised kernel; checked bit for bit against the prepared plan's ``latency_s`` on the
# 1M-attempt bench run). Only arrays of fewer than ~4 values take an exact division;
# figures are rounded to 12 significant digits, so that last-bit case cannot show.
_PER_NS = 1.0 / SECOND_NS


def latency_seconds(nanos: npt.NDArray[np.generic]) -> Floats:
    """Seconds as the prepared plan's ``latency_s`` computes them from nanoseconds."""
    return nanos.astype(np.float64) * _PER_NS


@dataclass(frozen=True)
class EventArrays:
    """Per event, in the frame's row order."""

    ttft: Floats  # TTFT in seconds (0.0 where not valid)
    ttft_valid: Bools  # a successful attempt that reports TTFT
    latency_ns: Ints  # end_ns - start_ns
    prompt: Ints  # absent = 0
    completion: Ints  # absent = 0
    ok: Bools
    retry: Bools  # all False when retries are not measured
    retries_measured: bool


def event_arrays(events: pl.DataFrame, *, explicit: bool | None = None) -> EventArrays:
    """The arrays of canonical ``events`` (see :class:`EventArrays`); ``explicit`` is
    :func:`~analytics.event_plans.explicit_call_ids` when the caller has it."""
    plan, measured = prepared_events(events, explicit=explicit)
    columns = plan.select(
        ttft=pl.col("ttft_ok_s").fill_null(0.0),
        ttft_valid=pl.col("ttft_ok_s").is_not_null(),
        latency_ns=pl.col("end_ns") - pl.col("start_ns"),
        prompt=pl.col("prompt"),
        completion=pl.col("completion"),
        ok=pl.col("ok").fill_null(False),
        retry=pl.col("is_retry").fill_null(False),
    ).collect()
    arrays = {name: columns.get_column(name).to_numpy() for name in columns.columns}
    return EventArrays(**arrays, retries_measured=measured)
