"""The minute table of SPEC §4/§8: one row per minute for the whole run (shard '*') and
per shard, every minute from the run's first to its last (empty minutes included).

A minute is the UTC minute of an attempt's **end** time. Float figures are rounded to
12 significant digits so a recomputation on another machine (different summation order
across threads) publishes the same numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

import numpy as np
import polars as pl

from analytics.concurrency import SecondSeries, minute_concurrency, second_series
from analytics.event_grid import EventGrid, event_grid
from analytics.event_plans import (
    minute_aggregations,
    prepared,
    rate_columns,
    retries_measured,
)
from analytics.minute_percentiles import RankedEvents, minute_percentiles, rank_events

WHOLE_RUN = "*"
SIGNIFICANT_DIGITS = 12

# Column order of the table (and of storage's minute_metrics, minus run_id/version).
MINUTE_COLUMNS: tuple[str, ...] = (
    "shard_id",
    "minute_utc",
    "calls_in_minute",
    "prompt_tpm_in",
    "completion_tpm_out",
    "tpm_total",
    "successes",
    "failures",
    "retries",
    "retry_rate",
    "success_rate",
    "ttft_p50_s",
    "ttft_p95_s",
    "ttft_p99_s",
    "ttft_mean_s",
    "ttft_variance_s2",
    "latency_p50_s",
    "latency_p95_s",
    "latency_p99_s",
    "in_flight_mean",
    "in_flight_max",
    "queue_depth_mean",
    "queue_depth_max",
    "concurrency_cap",
    "shards_active",
)
_COUNTS = [
    *("calls_in_minute", "prompt_tpm_in", "completion_tpm_out", "tpm_total"),
    *("successes", "failures"),
]
# Columns of minute_aggregations (what a bucket's own events give).
_AGGS = [*_COUNTS, "retries", "ttft_mean_s", "ttft_variance_s2"]


def prepared_events(events: pl.DataFrame) -> tuple[pl.LazyFrame, bool]:
    """The prepared lazy plan over ``events`` and whether retries are measured."""
    measured = retries_measured(events)
    all_known = events.get_column("resend_count").null_count() == 0
    return prepared(events.lazy(), measured=measured, all_resend_known=all_known), measured


def minute_utc(ns: int) -> str:
    """A minute's start as RFC 3339 UTC, e.g. ``2026-02-01T03:44:00Z``."""
    return datetime.fromtimestamp(ns // 1_000_000_000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _round_floats(frame: pl.DataFrame) -> pl.DataFrame:
    floats = [n for n, t in frame.schema.items() if t == pl.Float64]
    return frame.with_columns(pl.col(floats).round_sig_figs(SIGNIFICANT_DIGITS))


def _bucket_figures(events: pl.DataFrame, grid: EventGrid) -> tuple[pl.DataFrame, bool]:
    """Event-derived figures of every non-empty bucket, keyed like :func:`_keys`.

    Buckets are grouped by integer cell codes (one hash of an int per event, not of
    the shard id string); both groupings are collected together.
    """
    cells = grid.shard_count * grid.minute_count
    frame = events.with_columns(
        pl.Series("_cell", grid.shard_minute), pl.Series("_minute", grid.minute_index)
    )
    plan, measured = prepared_events(frame)
    aggs = minute_aggregations(measured)
    shards, whole = pl.collect_all(
        [
            plan.group_by("_cell").agg(aggs).rename({"_cell": "_key"}),
            plan.group_by("_minute").agg(aggs).select(*_AGGS, _key=pl.col("_minute") + cells),
        ]
    )
    return pl.concat([shards, whole.select(shards.columns)]), measured


def _keys(grid: EventGrid, percentiles: pl.DataFrame) -> pl.DataFrame:
    """The percentile rows (shard cells, then '*' minutes) with a join key and
    ``shards_active`` (1 for a shard cell with calls; shards with calls for '*')."""
    shape = (grid.shard_count, grid.minute_count)
    active = np.bincount(grid.shard_minute, minlength=shape[0] * shape[1]).reshape(shape) > 0
    shards_active = np.concatenate([active.ravel(), active.sum(axis=0)]).astype(np.int32)
    return percentiles.with_columns(
        _key=pl.int_range(0, pl.len(), dtype=pl.Int64), shards_active=pl.Series(shards_active)
    )


def build_minute_table(
    events: pl.DataFrame,
    caps: Mapping[str, int] | None = None,
    series: SecondSeries | None = None,
    *,
    grid: EventGrid | None = None,
    ranked: RankedEvents | None = None,
    percentiles: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """The minute table with ``minute_ns`` (int) in place of ``minute_utc``.

    ``series``, ``grid``, ``ranked`` and ``percentiles`` (from
    :func:`~analytics.minute_percentiles.minute_percentiles`) may be passed in when the
    caller computed them already; they are derived from ``events`` otherwise.
    """
    grid = grid if grid is not None else event_grid(events)
    series = series if series is not None else second_series(events, grid)
    buckets, measured = _bucket_figures(events, grid)
    # Every (shard, minute) cell and every '*' minute, first to last, with percentiles.
    if percentiles is None:
        ranked = ranked if ranked is not None else rank_events(events)
        percentiles = minute_percentiles(grid, ranked)
    keys = _keys(grid, percentiles)
    concurrency = minute_concurrency(series, caps)
    table = (
        keys.join(buckets, on="_key", how="left")
        .join(concurrency, on=["shard_id", "minute_ns"], how="left")
        .with_columns(pl.col(_COUNTS).fill_null(0))
        .with_columns(
            retries=pl.col("retries").fill_null(0) if measured else pl.lit(None, pl.Int64),
        )
        .with_columns(rate_columns())
        .sort("shard_id", "minute_ns")
    )
    columns = [c if c != "minute_utc" else "minute_ns" for c in MINUTE_COLUMNS]
    return _round_floats(table.select(columns))


def with_minute_utc(table: pl.DataFrame) -> pl.DataFrame:
    """The table with ``minute_utc`` as a UTC datetime instead of ``minute_ns``."""
    return table.with_columns(
        minute_utc=pl.from_epoch(pl.col("minute_ns"), time_unit="ns").dt.replace_time_zone("UTC")
    ).select(MINUTE_COLUMNS)


def compute_minutes(events: pl.DataFrame, caps: Mapping[str, int] | None = None) -> pl.DataFrame:
    """Minute table of SPEC §4 from canonical events alone (``caps`` only fills the cap column).

    Columns are :data:`MINUTE_COLUMNS`; ``minute_utc`` is a UTC datetime.
    """
    return with_minute_utc(build_minute_table(events, caps))
