"""Concurrency at 1-second resolution from span intervals (SPEC §4).

An attempt span covers the time its shard held a concurrency slot (start = admitted,
end = released); ``queued_at = start − queue_wait_s`` (SPEC §2). Both series are
*sampled at every whole second* t: in-flight(t) = attempts with start ≤ t < end,
queue depth(t) = attempts with queued_at ≤ t < start (only attempts that report
``queue_wait_s``). Sampled counts are integers and never exceed a slot cap that was
enforced, which is what the work-conserving check compares against.

Work-conserving check: among (shard, second) samples whose queue depth is > 0 on a shard
with a known cap, the share where in-flight < 0.9 × that shard's cap is the "sag"; the
check passes at ≤ 5 %. It is not measured (null) without queue data or caps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import polars as pl

from analytics.event_plans import MINUTE_NS, SECOND_NS

SAG_FRACTION_OF_CAP = 0.9
SAG_PASS_SHARE = 0.05
# Queue samples reach back at most this far before the first start (bounds the grid).
MAX_QUEUE_WAIT_S = 86_400.0


@dataclass(frozen=True)
class SecondSeries:
    """Per (shard_id, second) samples plus which shards report queue waits."""

    per_shard: pl.DataFrame  # shard_id, second, in_flight, queue_depth
    queue_shards: frozenset[str]


def _ceil_second(ns: pl.Series) -> pl.Series:
    return -((-ns) // SECOND_NS)


def _counts_at(sorted_steps: pl.Series, seconds: pl.Series) -> pl.Series:
    """How many steps are at or before each second (``sorted_steps`` ascending)."""
    return sorted_steps.search_sorted(seconds, side="right").cast(pl.Int64)


def _shard_seconds(shard: pl.DataFrame, seconds: pl.Series) -> pl.DataFrame:
    """Samples of one shard: count(start <= t) - count(end <= t), same for the queue.

    With whole-second sample instants t, ``start <= t`` is ``ceil(start / 1 s) <= t``,
    so sorted ceil-seconds and a binary search give each sample without any hashing.
    """
    starts = _ceil_second(shard.get_column("start_ns")).sort()
    ends = _ceil_second(shard.get_column("end_ns")).sort()
    queued = shard.filter(pl.col("queue_wait_s") >= 0)  # a negative wait is no queue
    wait_ns = (queued.get_column("queue_wait_s") * SECOND_NS).round().cast(pl.Int64)
    queued_at = _ceil_second(queued.get_column("start_ns") - wait_ns).sort()
    admitted = _ceil_second(queued.get_column("start_ns")).sort()
    return pl.DataFrame(
        {
            "second": seconds,
            "in_flight": _counts_at(starts, seconds) - _counts_at(ends, seconds),
            "queue_depth": _counts_at(queued_at, seconds) - _counts_at(admitted, seconds),
        }
    )


def second_series(events: pl.DataFrame) -> SecondSeries:
    """In-flight and queue depth per shard for every second of the run's whole minutes."""
    queue_shards = frozenset(
        events.filter(pl.col("queue_wait_s").is_not_null())["shard_id"].unique().to_list()
    )
    schema = {"shard_id": pl.String, "second": pl.Int64}
    schema |= {"in_flight": pl.Int64, "queue_depth": pl.Int64}
    if events.height == 0:
        return SecondSeries(pl.DataFrame(schema=schema), queue_shards)
    wait = pl.col("queue_wait_s").clip(0, MAX_QUEUE_WAIT_S).fill_null(0)
    bounds = events.select(
        lo=(pl.col("start_ns") - wait * SECOND_NS).min(), hi=pl.col("end_ns").max()
    ).row(0)
    # Whole minutes (epoch seconds are minute-aligned every 60 s); one sample past the end.
    first = int(bounds[0]) // SECOND_NS // 60 * 60 - 60
    last = -(-int(bounds[1]) // SECOND_NS) // 60 * 60 + 60
    seconds = pl.int_range(first, last, eager=True, dtype=pl.Int64)
    parts = [
        _shard_seconds(shard, seconds).with_columns(shard_id=pl.lit(key[0]))
        for key, shard in sorted(
            events.select("shard_id", "start_ns", "end_ns", "queue_wait_s")
            .partition_by("shard_id", as_dict=True)
            .items()
        )
    ]
    return SecondSeries(pl.concat(parts).select(list(schema)), queue_shards)


def minute_concurrency(series: SecondSeries, caps: Mapping[str, int] | None) -> pl.DataFrame:
    """Per (shard_id or '*', minute_ns): in-flight and queue depth mean/max, and the cap."""
    per_shard = series.per_shard.with_columns(
        minute_ns=pl.col("second") * SECOND_NS // MINUTE_NS * MINUTE_NS
    )
    total = per_shard.group_by("second", "minute_ns").agg(
        pl.col("in_flight").sum(),
        pl.col("queue_depth").filter(pl.col("shard_id").is_in(list(series.queue_shards))).sum(),
    )
    aggs = [
        pl.col("in_flight").mean().alias("in_flight_mean"),
        pl.col("in_flight").max().cast(pl.Int32).alias("in_flight_max"),
        pl.col("queue_depth").mean().alias("queue_depth_mean"),
        pl.col("queue_depth").max().cast(pl.Int32).alias("queue_depth_max"),
    ]
    shard_rows = per_shard.group_by("shard_id", "minute_ns").agg(aggs)
    whole = total.group_by("minute_ns").agg(aggs).with_columns(shard_id=pl.lit("*"))
    has_queue = pl.col("shard_id").is_in(list(series.queue_shards)) | (
        (pl.col("shard_id") == "*") & pl.lit(bool(series.queue_shards))
    )
    cap_map = dict(caps or {})
    cap_total = sum(cap_map.values()) if cap_map else None
    cap_col = pl.col("shard_id").replace_strict(
        {**cap_map, "*": cap_total}, default=None, return_dtype=pl.Int32
    )
    return pl.concat([shard_rows, whole.select(shard_rows.columns)]).with_columns(
        pl.when(has_queue).then(pl.col("queue_depth_mean")).alias("queue_depth_mean"),
        pl.when(has_queue).then(pl.col("queue_depth_max")).alias("queue_depth_max"),
        cap_col.alias("concurrency_cap"),
    )


def work_conserving(series: SecondSeries, caps: Mapping[str, int] | None) -> dict[str, Any]:
    """The SPEC §4 work-conserving check; figures are null when they cannot be measured."""
    result: dict[str, Any] = {
        "sag_share": None,
        "seconds_with_queue": None,
        "passes": None,
        "threshold": SAG_PASS_SHARE,
        "sag_below_fraction_of_cap": SAG_FRACTION_OF_CAP,
    }
    usable = {s: c for s, c in (caps or {}).items() if s in series.queue_shards and c}
    if not usable:
        return result
    queued = series.per_shard.filter(
        pl.col("shard_id").is_in(list(usable)) & (pl.col("queue_depth") > 0)
    ).with_columns(cap=pl.col("shard_id").replace_strict(usable, return_dtype=pl.Float64))
    result["seconds_with_queue"] = queued.height
    if queued.height == 0:
        return result
    sag = queued.filter(pl.col("in_flight") < SAG_FRACTION_OF_CAP * pl.col("cap")).height
    share = sag / queued.height
    result["sag_share"] = share
    result["passes"] = share <= SAG_PASS_SHARE
    return result
