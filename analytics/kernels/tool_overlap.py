"""Slot time held by tool spans (docs/metrics.md#diagnostics): the arithmetic the sealed
``slot_held_by_tool`` diagnostic (analytics/verdicts/run_diagnostics.py) and the live
per-minute sums (analytics/live/minute_state.py) share."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import polars as pl


def tool_held_ns(slots: pl.DataFrame, tools: pl.DataFrame) -> npt.NDArray[np.int64]:
    """Per row of ``slots`` (``trace_id``, ``start_ns``, ``end_ns``): nanoseconds of
    ``tools`` (``trace_id``, ``tool_start``, ``tool_end``) of the same trace inside the
    slot, clipped to it, overlapping tools counted once. The sealed figure and the live
    per-minute sums (analytics/live/minute_state.py) both add these."""
    attempts = slots.select("trace_id", "start_ns", "end_ns").with_row_index("attempt")
    inside = (
        attempts.join(tools.select("trace_id", "tool_start", "tool_end"), on="trace_id")
        .with_columns(
            lo=pl.max_horizontal("start_ns", "tool_start"),
            hi=pl.min_horizontal("end_ns", "tool_end"),
        )
        .filter(pl.col("hi") > pl.col("lo"))
        .sort("attempt", "lo")
        # Overlapping tools count once: each interval adds only what extends past the
        # furthest end seen so far within its attempt.
        .with_columns(reach=pl.col("hi").cum_max().shift(1).over("attempt"))
        .with_columns(
            added=(pl.col("hi") - pl.max_horizontal("lo", pl.col("reach").fill_null(0))).clip(
                lower_bound=0
            )
        )
        .group_by("attempt")
        .agg(pl.col("added").sum())
    )
    held = np.zeros(slots.height, dtype=np.int64)
    held[inside.get_column("attempt").to_numpy()] = inside.get_column("added").to_numpy()
    return held
