"""Event-derived figures of every (shard, minute) cell and every whole-run minute (docs/metrics.md).

Counts and token sums come from one compiled pass per grouping; TTFT (successful
attempts that report it) and latency (``(end_ns − start_ns) / 1 s``, every attempt)
are laid out group by group and sorted per group, which gives the percentiles (exactly
Polars' ``quantile(q, "linear")``), the TTFT mean and the population variance.

Rows: every shard's minutes (shards in sorted id order, minutes first to last), then
every whole-run minute (shard ``'*'``), like :func:`cell_keys`. The shard rows are every
(shard, minute) cell of the grid by default; with :func:`occupied_cells` only the cells
some event ends in (the streaming seal: a run whose few attempts lie weeks apart costs
its attempts, not shards × minutes, docs/metrics.md#minute-table). The whole-run rows
are every minute of the grid either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from tpmledger.analytics.kernels.event_arrays import EventArrays, latency_seconds
from tpmledger.analytics.kernels.event_grid import EventGrid
from tpmledger.analytics.kernels.event_plans import derived_counts
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
from tpmledger.durations import MINUTE_NS
from tpmledger.storage.schema.minute_keys import WHOLE_RUN

PERCENTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}
QUANTILES = list(PERCENTILES.values())
_TOTALS = ("calls_in_minute", "prompt_tpm_in", "completion_tpm_out", "successes", "retries")

Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Cells:
    """The (shard, minute) cells that get a row, in shard then minute order, and the cell
    of every event (``-1``: none; only :func:`dense_cells` has cells without events)."""

    shard_codes: Ints  # per cell
    minute_index: Ints  # per cell
    of_event: Ints  # per event

    @property
    def count(self) -> int:
        return int(self.shard_codes.size)


def dense_cells(grid: EventGrid) -> Cells:
    """Every cell of the grid: each shard's every minute."""
    count = grid.minute_count
    shards = np.repeat(np.arange(grid.shard_count, dtype=np.int64), count)
    minutes = np.tile(np.arange(count, dtype=np.int64), grid.shard_count)
    return Cells(shards, minutes, grid.shard_minute)


def occupied_cells(grid: EventGrid) -> Cells:
    """Only the cells some event ends in (memory follows the events, not the grid)."""
    keys, of_event = np.unique(grid.shard_minute, return_inverse=True)
    count = max(grid.minute_count, 1)
    return Cells(keys // count, keys % count, of_event.astype(np.int64).ravel())


def cell_keys(grid: EventGrid, cells: Cells | None = None) -> pl.DataFrame:
    """``shard_id`` and ``minute_ns`` of every row, in the order described above."""
    cells = cells if cells is not None else dense_cells(grid)
    minutes = grid.minute_starts_ns()
    count = grid.minute_count
    return pl.DataFrame(
        {
            "shard_id": pl.concat(
                [
                    pl.Series(grid.shard_ids, dtype=pl.String).gather(cells.shard_codes),
                    pl.repeat(WHOLE_RUN, count, eager=True, dtype=pl.String),
                ]
            ),
            "minute_ns": np.concatenate(
                [grid.first_minute_ns + cells.minute_index * MINUTE_NS, minutes.to_numpy()]
            ).astype(np.int64),
        },
        schema={"shard_id": pl.String, "minute_ns": pl.Int64},
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
    grid: EventGrid,
    values: npt.NDArray[np.generic],
    valid: npt.NDArray[np.bool_],
    name: str,
    cells: Cells | None = None,
) -> ValueGroups:
    """Sort ``values`` (where ``valid``) per cell (``cells``, every cell of the grid by
    default) and per minute; ``name`` is ``"ttft"`` (seconds) or ``"latency"`` (integer
    nanoseconds, sorted as integers)."""
    # (Merging each minute's sorted shard runs measured slower than sorting again.)
    if cells is None:
        by_cell = sort_groups(
            values, valid, grid.shard_minute, grid.shard_count * grid.minute_count
        )
    else:
        by_cell = sort_groups(values, valid, cells.of_event, cells.count)
    return ValueGroups(
        by_cell,
        sort_groups(values, valid, grid.minute_index, grid.minute_count),
        latency_seconds if name == "latency" else None,
    )


def event_value_groups(
    grid: EventGrid, arrays: EventArrays, cells: Cells | None = None
) -> tuple[ValueGroups, ValueGroups]:
    """TTFT (successful attempts that report it) and latency (every attempt), grouped
    per cell of ``cells`` (every cell of the grid by default) and per minute."""
    every = np.ones(arrays.latency_ns.size, dtype=np.bool_)
    return (
        value_groups(grid, arrays.ttft, arrays.ttft_valid, "ttft", cells),
        value_groups(grid, arrays.latency_ns, every, "latency", cells),
    )


def _value_columns(groups: ValueGroups, name: str) -> dict[str, pl.Series]:
    """Percentile columns (and for TTFT the mean and variance), cells then minutes."""
    return value_columns(groups.by_cell_and_minute, groups.to_values, name)


def value_columns(
    groups: Sequence[SortedGroups], to_values: ToValues | None, name: str
) -> dict[str, pl.Series]:
    """Percentile columns (and for TTFT the mean and variance) of every group of
    ``groups``, one after another; null for a group without values. The seal's cells and
    the live path's minutes (analytics/live/minute_state_figures.py) both take theirs here."""
    columns: dict[str, pl.Series] = {}
    parts = [group_quantiles(g, QUANTILES, to_values) for g in groups]
    missing = ~np.concatenate([has for _, has in parts])
    for i, p in enumerate(PERCENTILES):
        joined = np.concatenate([figures[i] for figures, _ in parts])
        columns[f"{name}_{p}_s"] = _null_where(joined, missing)
    if name == "ttft":
        moments = [group_moments(g) for g in groups]
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
    grid: EventGrid,
    arrays: EventArrays,
    ttft: ValueGroups,
    latency: ValueGroups,
    cells: Cells | None = None,
) -> CellFigures:
    """Counts, token sums, percentiles and TTFT moments of every row (see module doc);
    ``cells`` as given to :func:`event_value_groups` (every cell of the grid by default)."""
    cells = cells if cells is not None else dense_cells(grid)
    columns = (arrays.prompt, arrays.completion, arrays.ok, arrays.retry)
    totals = group_totals(cells.of_event, cells.count, *columns)
    # Every event is in one cell: a minute's totals are its cells' (exact integer sums).
    per_minute = np.zeros((grid.minute_count, totals.shape[1]), dtype=np.int64)
    np.add.at(per_minute, cells.minute_index, totals)
    both = np.concatenate([totals, per_minute])
    counts = {name: pl.Series(name, both[:, i]) for i, name in enumerate(_TOTALS)}
    active = totals[:, 0] > 0
    by_minute = np.bincount(cells.minute_index[active], minlength=grid.minute_count)
    shards_active = np.concatenate([active, by_minute]).astype(np.int32)
    calls, successes, retries = (counts[n] for n in ("calls_in_minute", "successes", "retries"))
    if not arrays.retries_measured:
        retries = retries.clear(retries.len())  # not measured: null, never 0
    rows = (
        cell_keys(grid, cells)
        .with_columns(
            calls_in_minute=calls,
            prompt_tpm_in=counts["prompt_tpm_in"],
            completion_tpm_out=counts["completion_tpm_out"],
            successes=successes,
            retries=retries,
            shards_active=pl.Series(shards_active),
            **_value_columns(ttft, "ttft"),
            **_value_columns(latency, "latency"),
        )
        .with_columns(derived_counts())
    )
    tokens = np.zeros(grid.shard_count, dtype=np.int64)
    np.add.at(tokens, cells.shard_codes, totals[:, 1] + totals[:, 2])
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
