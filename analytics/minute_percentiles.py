"""TTFT and latency percentiles per (shard, minute), per minute and per run (SPEC §4).

TTFT counts successful attempts that report it; latency is ``(end_ns − start_ns) / 1 s``
over every attempt. Each value column is ranked once and then ordered per grouping with
one integer sort (:mod:`analytics.group_quantiles`), which gives exactly what Polars'
``quantile(q, "linear")`` gives per group.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from analytics.event_grid import EventGrid
from analytics.event_plans import OK, SECOND_NS
from analytics.group_quantiles import (
    RankedValues,
    grouped_quantiles,
    overall_quantiles,
    rank_values,
    ranked_by_integers,
)

PERCENTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}
# Minute-table columns, per measured value: ttft_p50_s, …, latency_p99_s.
PERCENTILE_COLUMNS: tuple[str, ...] = tuple(
    f"{name}_{p}_s" for name in ("ttft", "latency") for p in PERCENTILES
)


@dataclass(frozen=True)
class RankedEvents:
    """The two percentile columns of a run, each sorted and ranked once."""

    ttft: RankedValues
    latency: RankedValues


def rank_events(events: pl.DataFrame) -> RankedEvents:
    """Rank TTFT of successful attempts (others are nulls) and every latency."""
    latency_ns = pl.col("end_ns") - pl.col("start_ns")
    ttft, ok, nanos, seconds = events.select(
        ttft=pl.col("ttft_s").fill_null(0.0),
        ok=(OK & pl.col("ttft_s").is_not_null()).fill_null(False),
        nanos=latency_ns,
        seconds=latency_ns / SECOND_NS,  # exactly the prepared plan's latency_s
    ).get_columns()
    return RankedEvents(
        ttft=rank_values(ttft.to_numpy(), ok.to_numpy()),
        latency=ranked_by_integers(nanos.to_numpy(), seconds.to_numpy()),
    )


def run_percentiles(ranked: RankedEvents) -> dict[str, float | None]:
    """Run-level percentiles keyed ``ttft_p50`` … ``lat_p99``."""
    out: dict[str, float | None] = {}
    for prefix, values in (("ttft", ranked.ttft), ("lat", ranked.latency)):
        figures = overall_quantiles(values, list(PERCENTILES.values()))
        out |= {f"{prefix}_{p}": v for p, v in zip(PERCENTILES, figures, strict=True)}
    return out


def _columns(ranked: RankedEvents, groups: np.ndarray, count: int) -> dict[str, pl.Series]:
    columns: dict[str, pl.Series] = {}
    for name, values in (("ttft", ranked.ttft), ("latency", ranked.latency)):
        figures, has = grouped_quantiles(values, groups, count, list(PERCENTILES.values()))
        unmeasured = np.flatnonzero(~has)
        for p, column in zip(PERCENTILES, figures, strict=True):
            # A group without values has no percentile (null, "not measured").
            columns[f"{name}_{p}_s"] = pl.Series(column).scatter(unmeasured, None)
    return columns


def minute_percentiles(grid: EventGrid, ranked: RankedEvents) -> pl.DataFrame:
    """Percentile columns for every (shard, minute) cell and every whole-run minute ('*')."""
    minutes = grid.minute_starts_ns()
    count = grid.minute_count
    shards = pl.DataFrame(
        {
            "shard_id": pl.Series(grid.shard_ids, dtype=pl.String).gather(
                np.repeat(np.arange(grid.shard_count), count)
            ),
            "minute_ns": pl.concat([minutes] * grid.shard_count)
            if grid.shard_count
            else minutes.clear(),
            **_columns(ranked, grid.shard_minute, grid.shard_count * count),
        }
    )
    whole = pl.DataFrame(
        {
            "shard_id": pl.repeat("*", count, eager=True, dtype=pl.String),
            "minute_ns": minutes,
            **_columns(ranked, grid.minute_index, count),
        }
    )
    return pl.concat([shards, whole])
