"""Concurrency at 1-second resolution from span intervals (SPEC §4).

An attempt span covers the time its shard held a concurrency slot (start = admitted,
end = released); ``queued_at = start − queue_wait_s`` (SPEC §2). Both series are
*sampled at every whole second* t: in-flight(t) = attempts with start ≤ t < end,
queue depth(t) = attempts with queued_at ≤ t < start (only attempts that report
``queue_wait_s``). Sampled counts are integers and never exceed a slot cap that was
enforced, which is what the work-conserving check compares against.

With whole-second sample instants t, ``start <= t`` is ``ceil(start / 1 s) <= t``, so a
series is a running sum of +1/−1 steps at ceil-seconds over the dense (shard, second)
grid: one compiled pass over the events and one along the seconds
(:func:`~analytics.group_kernels.second_samples`).

Work-conserving check: among (shard, second) samples whose queue depth is > 0 on a shard
with a known cap, the share where in-flight < 0.9 × that shard's cap is the "sag"; the
check passes at ≤ 5 %. It is not measured (null) without queue data or caps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from analytics.event_grid import EventGrid, event_grid
from analytics.figure_rules import SAG_FRACTION_OF_CAP, SAG_PASS_SHARE, work_conserving_result

__all__ = ["SAG_FRACTION_OF_CAP", "SAG_PASS_SHARE", "SecondSeries", "second_series"]
from analytics.event_plans import SECOND_NS
from analytics.group_kernels import minute_stats, second_samples

# Queue samples reach back at most this far before the first start (bounds the grid).
MAX_QUEUE_WAIT_S = 86_400.0

Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class SecondSeries:
    """Samples per shard (rows, in ``shard_ids`` order) and second (columns)."""

    shard_ids: tuple[str, ...]
    first_second: int  # epoch second of column 0; a whole minute
    in_flight: Ints  # shape (shards, seconds)
    queue_depth: Ints  # shape (shards, seconds)
    queue_shards: frozenset[str]


def second_series(events: pl.DataFrame, grid: EventGrid | None = None) -> SecondSeries:
    """In-flight and queue depth per shard for every second of the run's whole minutes."""
    grid = grid if grid is not None else event_grid(events)
    empty = np.zeros((grid.shard_count, 0), dtype=np.int64)
    if events.height == 0:
        return SecondSeries(grid.shard_ids, 0, empty, empty, frozenset())
    wait = events.get_column("queue_wait_s")
    first, in_flight, depth, reporting = second_samples(
        grid.shard_codes,
        events.get_column("start_ns").to_numpy(),
        events.get_column("end_ns").to_numpy(),
        wait.fill_null(-1.0).to_numpy(),  # negative: no queue
        wait.is_not_null().to_numpy(),
        MAX_QUEUE_WAIT_S,
        grid.shard_count,
    )
    queue_shards = frozenset(s for s, n in zip(grid.shard_ids, reporting, strict=True) if n)
    return SecondSeries(grid.shard_ids, first, in_flight, depth, queue_shards)


def minute_concurrency(series: SecondSeries, caps: Mapping[str, int] | None) -> pl.DataFrame:
    """Per (shard_id or '*', minute_ns): in-flight and queue depth mean/max, and the cap."""
    queue_rows = np.array([s in series.queue_shards for s in series.shard_ids], dtype=np.bool_)
    in_flight = np.vstack([series.in_flight, series.in_flight.sum(axis=0, keepdims=True)])
    queue_total = series.queue_depth[queue_rows].sum(axis=0, keepdims=True)
    depth = np.vstack([series.queue_depth, queue_total])
    flight_mean, flight_max = minute_stats(in_flight)
    depth_mean, depth_max = minute_stats(depth)
    shard_ids = [*series.shard_ids, "*"]
    minutes = flight_mean.shape[1]
    minute_ns = (series.first_second + 60 * np.arange(minutes, dtype=np.int64)) * SECOND_NS
    cap_map = dict(caps or {})
    caps_by_row = {**cap_map, "*": sum(cap_map.values()) if cap_map else None}
    has_queue = np.append(queue_rows, bool(series.queue_shards)).repeat(minutes)
    frame = pl.DataFrame(
        {
            "shard_id": np.repeat(np.array(shard_ids, dtype=object), minutes).tolist(),
            "minute_ns": np.tile(minute_ns, len(shard_ids)),
            "in_flight_mean": flight_mean.ravel(),
            "in_flight_max": flight_max.ravel(),
            "queue_depth_mean": depth_mean.ravel(),
            "queue_depth_max": depth_max.ravel(),
            "has_queue": has_queue,
        },
        schema_overrides={"shard_id": pl.String, "minute_ns": pl.Int64},
    )
    queue = pl.col("has_queue")
    return frame.select(
        "shard_id",
        "minute_ns",
        "in_flight_mean",
        pl.col("in_flight_max").cast(pl.Int32),
        pl.when(queue).then(pl.col("queue_depth_mean")).alias("queue_depth_mean"),
        pl.when(queue).then(pl.col("queue_depth_max").cast(pl.Int32)).alias("queue_depth_max"),
        pl.col("shard_id")
        .replace_strict(caps_by_row, default=None, return_dtype=pl.Int32)
        .alias("concurrency_cap"),
    )


def work_conserving(series: SecondSeries, caps: Mapping[str, int] | None) -> dict[str, Any]:
    """The SPEC §4 work-conserving check; figures are null when they cannot be measured."""
    result = work_conserving_result()
    usable = {s: c for s, c in (caps or {}).items() if s in series.queue_shards and c}
    if not usable:
        return result
    queued = sag = 0
    for row, shard in enumerate(series.shard_ids):
        if shard in usable:
            waiting = series.queue_depth[row] > 0
            queued += int(waiting.sum())
            low = series.in_flight[row] < SAG_FRACTION_OF_CAP * float(usable[shard])
            sag += int((waiting & low).sum())
    return work_conserving_result(queued, sag)
