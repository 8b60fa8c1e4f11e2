"""The minute table of docs/metrics.md: one row per minute for the whole run (shard '*') and
per shard, every minute from the run's first to its last (empty minutes included).

A minute is the UTC minute of an attempt's **end** time. Float figures are rounded to
:data:`SIGNIFICANT_DIGITS` significant digits so a recomputation on another machine
(different summation order across threads) publishes the same numbers. The table is
computed by the streaming seal (:mod:`tpmledger.analytics.seal.run_stream`) and the live
path; this module holds what they share: the column order and the ``minute_utc`` form.
"""

from __future__ import annotations

import polars as pl

from tpmledger.analytics.kernels.figure_rules import SIGNIFICANT_DIGITS
from tpmledger.storage.minute_columns import MINUTE_COLUMNS  # the table's column order

__all__ = ["MINUTE_COLUMNS", "SIGNIFICANT_DIGITS", "with_minute_utc"]


def with_minute_utc(table: pl.DataFrame) -> pl.DataFrame:
    """The table with ``minute_utc`` as a UTC datetime instead of ``minute_ns``."""
    return table.with_columns(
        minute_utc=pl.from_epoch(pl.col("minute_ns"), time_unit="ns").dt.replace_time_zone("UTC")
    ).select(MINUTE_COLUMNS)
