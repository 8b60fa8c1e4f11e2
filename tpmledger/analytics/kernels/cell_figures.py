"""Event-derived figures of every (shard, minute) cell and every whole-run minute (docs/metrics.md).

Counts and token sums come from one compiled pass per grouping; TTFT (successful
attempts that report it) and latency (``(end_ns − start_ns) / 1 s``, every attempt)
are laid out group by group and sorted per group, which gives the percentiles (exactly
Polars' ``quantile(q, "linear")``), the TTFT mean and the population variance.

Rows: every shard's minutes (shards in sorted id order, minutes first to last), then
every whole-run minute (shard ``'*'``), like :func:`cell_keys`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from tpmledger.analytics.kernels.event_arrays import EventArrays, latency_seconds
from tpmledger.analytics.kernels.event_grid import EventGrid
from tpmledger.analytics.kernels.group_kernels import group_totals
from tpmledger.analytics.kernels.group_quantiles import (
    SortedGroups,
    ToValues,
    concatenated,
    group_moments,
    group_quantiles,
    merged,
    sort_groups,
)
from tpmledger.storage.minute_keys import WHOLE_RUN

PERCENTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}
QUANTILES = list(PERCENTILES.values())
_TOTALS = ("calls_in_minute", "prompt_tpm_in", "completion_tpm_out", "successes", "retries")

Ints = npt.NDArray[np.int64]


def cell_keys(grid: EventGrid) -> pl.DataFrame:
    """``shard_id`` and ``minute_ns`` of every row, in the order described above."""
    minutes = grid.minute_starts_ns()
    count = grid.minute_count
    shard_rows = np.repeat(np.arange(grid.shard_count), count)
    shard_minutes = pl.concat([minutes] * grid.shard_count) if grid.shard_count else minutes.clear()
    return pl.DataFrame(
        {
            "shard_id": pl.concat(
                [
                    pl.Series(grid.shard_ids, dtype=pl.String).gather(shard_rows),
                    pl.repeat(WHOLE_RUN, count, eager=True, dtype=pl.String),
                ]
            ),
            "minute_ns": pl.concat([shard_minutes, minutes]),
        }
    )


def _null_where(values: npt.NDArray[Any], missing: npt.NDArray[np.bool_]) -> pl.Series:
    return pl.Series(values).scatter(np.flatnonzero(missing), None)


@dataclass(frozen=True)
class ValueGroups:
    """One value's valid entries sorted per (shard, minute) cell and per minute."""

    by_cell: SortedGroups
    by_minute: SortedGroups
    to_values: ToValues | None  # sorted entries -> seconds (None: already seconds)

    @property
    def by_cell_and_minute(self) -> tuple[SortedGroups, SortedGroups]:
        return self.by_cell, self.by_minute


def value_groups(
    grid: EventGrid, values: npt.NDArray[np.generic], valid: npt.NDArray[np.bool_], name: str
) -> ValueGroups:
    """Sort ``values`` (where ``valid``) per cell and per minute; ``name`` is ``"ttft"``
    (seconds) or ``"latency"`` (integer nanoseconds, sorted as integers)."""
    # (Merging each minute's sorted shard runs measured slower than sorting again.)
    cell_count = grid.shard_count * grid.minute_count
    return ValueGroups(
        sort_groups(values, valid, grid.shard_minute, cell_count),
        sort_groups(values, valid, grid.minute_index, grid.minute_count),
        latency_seconds if name == "latency" else None,
    )


def event_value_groups(grid: EventGrid, arrays: EventArrays) -> tuple[ValueGroups, ValueGroups]:
    """TTFT (successful attempts that report it) and latency (every attempt), grouped."""
    every = np.ones(arrays.latency_ns.size, dtype=np.bool_)
    return (
        value_groups(grid, arrays.ttft, arrays.ttft_valid, "ttft"),
        value_groups(grid, arrays.latency_ns, every, "latency"),
    )


def _value_columns(groups: ValueGroups, name: str) -> dict[str, pl.Series]:
    """Percentile columns (and for TTFT the mean and variance), cells then minutes."""
    columns: dict[str, pl.Series] = {}
    parts = [group_quantiles(g, QUANTILES, groups.to_values) for g in groups.by_cell_and_minute]
    missing = ~np.concatenate([has for _, has in parts])
    for i, p in enumerate(PERCENTILES):
        joined = np.concatenate([figures[i] for figures, _ in parts])
        columns[f"{name}_{p}_s"] = _null_where(joined, missing)
    if name == "ttft":
        moments = [group_moments(g) for g in groups.by_cell_and_minute]
        mean = np.concatenate([m for m, _ in moments])
        variance = np.concatenate([v for _, v in moments])
        columns["ttft_mean_s"] = _null_where(mean, missing)
        columns["ttft_variance_s2"] = _null_where(variance, missing)
    return columns


@dataclass(frozen=True)
class CellFigures:
    """The rows described in the module docstring, and the per-shard token totals."""

    rows: pl.DataFrame
    shard_tokens: Ints  # prompt + completion per shard code


def cell_figures(
    grid: EventGrid, arrays: EventArrays, ttft: ValueGroups, latency: ValueGroups
) -> CellFigures:
    """Counts, token sums, percentiles and TTFT moments of every row (see module doc)."""
    shape = (grid.shard_count, grid.minute_count)
    totals = group_totals(
        grid.shard_minute,
        shape[0] * shape[1],
        arrays.prompt,
        arrays.completion,
        arrays.ok,
        arrays.retry,
    )
    per_minute = totals.reshape(shape[0], shape[1], len(_TOTALS)).sum(axis=0)
    both = np.concatenate([totals, per_minute])
    counts = {name: pl.Series(name, both[:, i]) for i, name in enumerate(_TOTALS)}
    active = (totals[:, 0] > 0).reshape(shape)
    shards_active = np.concatenate([active.ravel(), active.sum(axis=0)]).astype(np.int32)
    calls, successes, retries = (counts[n] for n in ("calls_in_minute", "successes", "retries"))
    if not arrays.retries_measured:
        retries = retries.clear(retries.len())  # not measured: null, never 0
    rows = cell_keys(grid).with_columns(
        calls_in_minute=calls,
        prompt_tpm_in=counts["prompt_tpm_in"],
        completion_tpm_out=counts["completion_tpm_out"],
        tpm_total=counts["prompt_tpm_in"] + counts["completion_tpm_out"],
        successes=successes,
        failures=calls - successes,
        retries=retries,
        shards_active=pl.Series(shards_active),
        **_value_columns(ttft, "ttft"),
        **_value_columns(latency, "latency"),
    )
    tokens = (totals[:, 1] + totals[:, 2]).reshape(shape).sum(axis=1)
    return CellFigures(rows, tokens)


def run_values(ttft: ValueGroups, latency: ValueGroups) -> dict[str, float | None]:
    """Run-level percentiles (``ttft_p50`` … ``lat_p99``), TTFT mean and variance and the
    latency mean. Sums run over the per-minute sorted values (minute after minute), an
    order that does not depend on the order events were read in."""
    out: dict[str, float | None] = {}
    for prefix, groups in (("ttft", ttft), ("lat", latency)):
        figures, has = group_quantiles(merged(groups.by_minute), QUANTILES, groups.to_values)
        mean, variance = group_moments(
            concatenated(groups.by_minute), groups.to_values, variance=prefix == "ttft"
        )
        measured = bool(has[0])
        out |= {
            f"{prefix}_{p}": float(v[0]) if measured else None
            for p, v in zip(PERCENTILES, figures, strict=True)
        }
        out[f"{prefix}_mean"] = float(mean[0]) if measured else None
        if prefix == "ttft":
            out["ttft_var"] = float(variance[0]) if measured else None
    return out
