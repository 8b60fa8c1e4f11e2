"""TTFT and latency percentiles per (shard, minute), per minute and per run (SPEC §4).

TTFT counts successful attempts that report it; latency is ``(end_ns − start_ns) / 1 s``
over every attempt. Each value column is ranked once and then ordered per grouping with
one integer sort (:mod:`analytics.group_quantiles`), which gives exactly what Polars'
``quantile(q, "linear")`` gives per group.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt
import polars as pl

from analytics.event_grid import EventGrid
from analytics.event_plans import OK, SECOND_NS
from analytics.group_quantiles import (
    RankedValues,
    grouped_integer_quantiles,
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


# Polars computes ``int_column / 1e9`` as a multiplication by the reciprocal (its
# vectorised kernel; checked bit for bit against the prepared plan's ``latency_s`` on the
# 1M-attempt bench run). Only arrays of fewer than ~4 values take an exact division;
# figures are rounded to 12 significant digits, so that last-bit case cannot show.
_PER_NS = 1.0 / SECOND_NS


def latency_seconds(nanos: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """Seconds as the prepared plan's ``latency_s`` computes them from nanoseconds."""
    return nanos.astype(np.float64) * _PER_NS


@dataclass(frozen=True)
class RankedEvents:
    """TTFT of successful attempts ranked once; latency as integer nanoseconds."""

    ttft: RankedValues
    latency_ns: npt.NDArray[np.int64]

    @cached_property
    def latency(self) -> RankedValues:
        """Latency ranked (only needed when integer keys cannot be combined)."""
        return ranked_by_integers(self.latency_ns, latency_seconds(self.latency_ns))


def rank_events(events: pl.DataFrame) -> RankedEvents:
    """Rank TTFT of successful attempts (others are nulls); latency stays integer ns."""
    ttft, ok, nanos = events.select(
        ttft=pl.col("ttft_s").fill_null(0.0),
        ok=(OK & pl.col("ttft_s").is_not_null()).fill_null(False),
        nanos=pl.col("end_ns") - pl.col("start_ns"),
    ).get_columns()
    return RankedEvents(rank_values(ttft.to_numpy(), ok.to_numpy()), nanos.to_numpy())


def run_percentiles(ranked: RankedEvents) -> dict[str, float | None]:
    """Run-level percentiles keyed ``ttft_p50`` … ``lat_p99``."""
    out: dict[str, float | None] = {}
    ordered_ns = np.sort(ranked.latency_ns)
    latency = RankedValues(
        latency_seconds(ordered_ns), ordered_ns, np.ones(ordered_ns.size, dtype=np.bool_)
    )
    for prefix, values in (("ttft", ranked.ttft), ("lat", latency)):
        figures = overall_quantiles(values, list(PERCENTILES.values()))
        out |= {f"{prefix}_{p}": v for p, v in zip(PERCENTILES, figures, strict=True)}
    return out


def _grouped(
    ranked: RankedEvents, name: str, groups: np.ndarray, count: int
) -> tuple[list[npt.NDArray[np.float64]], npt.NDArray[np.bool_]]:
    quantiles = list(PERCENTILES.values())
    if name == "ttft":
        return grouped_quantiles(ranked.ttft, groups, count, quantiles)
    # Latency sorts as integer nanoseconds; ranking is only the overflow fallback.
    by_keys = grouped_integer_quantiles(
        ranked.latency_ns, groups, count, quantiles, latency_seconds
    )
    return by_keys or grouped_quantiles(ranked.latency, groups, count, quantiles)


def _columns(ranked: RankedEvents, groups: np.ndarray, count: int) -> dict[str, pl.Series]:
    columns: dict[str, pl.Series] = {}
    for name in ("ttft", "latency"):
        figures, has = _grouped(ranked, name, groups, count)
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
