"""The minute table of docs/metrics.md: one row per minute for the whole run (shard '*') and
per shard, every minute from the run's first to its last (empty minutes included).

A minute is the UTC minute of an attempt's **end** time. Float figures are rounded to
12 significant digits so a recomputation on another machine (different summation order
across threads) publishes the same numbers.
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from tpmledger.analytics.kernels.cell_figures import CellFigures, cell_figures, event_value_groups
from tpmledger.analytics.kernels.concurrency import SecondSeries, minute_concurrency, second_series
from tpmledger.analytics.kernels.event_arrays import event_arrays
from tpmledger.analytics.kernels.event_grid import EventGrid, event_grid
from tpmledger.analytics.kernels.event_plans import rate_columns
from tpmledger.analytics.kernels.figure_rules import SIGNIFICANT_DIGITS
from tpmledger.storage.minute_columns import MINUTE_COLUMNS  # the table's column order


def _round_floats(frame: pl.DataFrame) -> pl.DataFrame:
    floats = [n for n, t in frame.schema.items() if t == pl.Float64]
    return frame.with_columns(pl.col(floats).round_sig_figs(SIGNIFICANT_DIGITS))


def build_minute_table(
    events: pl.DataFrame,
    caps: Mapping[str, int] | None = None,
    series: SecondSeries | None = None,
    *,
    grid: EventGrid | None = None,
    cells: CellFigures | None = None,
) -> pl.DataFrame:
    """The minute table with ``minute_ns`` (int) in place of ``minute_utc``.

    ``series``, ``grid`` and ``cells`` may be passed in when the caller computed them
    already; they are derived from ``events`` otherwise.
    """
    grid = grid if grid is not None else event_grid(events)
    series = series if series is not None else second_series(events, grid)
    if cells is None:
        arrays = event_arrays(events)
        cells = cell_figures(grid, arrays, *event_value_groups(grid, arrays))
    table = (
        cells.rows.join(minute_concurrency(series, caps), on=["shard_id", "minute_ns"], how="left")
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
    """Minute table of docs/metrics.md from canonical events alone (``caps`` only fills the cap
    column).

    Columns are :data:`MINUTE_COLUMNS`; ``minute_utc`` is a UTC datetime.
    """
    return with_minute_utc(build_minute_table(events, caps))
