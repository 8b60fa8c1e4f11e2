"""The minute table of docs/metrics.md: one row per minute for the whole run (shard '*'),
every minute from the run's first to its last (empty minutes included), and per shard a
row for each minute where the shard has something to show: an attempt ended in it, or
one was in flight or queued at some second of it. A shard's other minutes are implicit:
they show what :data:`EMPTY_FIGURES` says (0 for counts and samples, null for what was
not measured) with the run's rules applied (``retries`` 0 when the run measures retries,
queue depth 0 on shards that report queue waits, the shard's cap). So a run whose few
attempts lie weeks apart costs its attempts, not shards × minutes.

A minute is the UTC minute of an attempt's **end** time. Float figures are rounded to
:data:`SIGNIFICANT_DIGITS` significant digits so a recomputation on another machine
(different summation order across threads) publishes the same numbers. The table is
computed by the streaming seal (:mod:`tpmledger.analytics.seal.run_stream`) and the live
path; this module holds what they share: the column order and the ``minute_utc`` form.
"""

from __future__ import annotations

import polars as pl

from tpmledger.analytics.kernels.figure_rules import SIGNIFICANT_DIGITS
from tpmledger.storage.schema.minute_columns import (  # the table's column order, counts
    MINUTE_COLUMNS,
    MINUTE_COUNTS,
)
from tpmledger.storage.schema.minute_keys import WHOLE_RUN

__all__ = [
    "EMPTY_COUNTS",
    "MINUTE_COLUMNS",
    "SIGNIFICANT_DIGITS",
    "carries_figures",
    "with_minute_utc",
]

#: Counts that are 0 in an empty minute (the samples' maxima are filled with their means,
#: by the table's rules; rates and percentiles stay null): the declaration's counts.
EMPTY_COUNTS: tuple[str, ...] = MINUTE_COUNTS


def carries_figures() -> pl.Expr:
    """Rows the table keeps: every whole-run row, and a shard's row where an attempt
    ended or something was in flight or queued (the others are implicit, see above)."""
    return (
        (pl.col("shard_id") == WHOLE_RUN)
        | (pl.col("calls_in_minute") > 0)
        | (pl.col("in_flight_max") > 0)
        | (pl.col("queue_depth_max").fill_null(0) > 0)
    )


def with_minute_utc(table: pl.DataFrame) -> pl.DataFrame:
    """The table with ``minute_utc`` as a UTC datetime instead of ``minute_ns``."""
    return table.with_columns(
        minute_utc=pl.from_epoch(pl.col("minute_ns"), time_unit="ns").dt.replace_time_zone("UTC")
    ).select(MINUTE_COLUMNS)
