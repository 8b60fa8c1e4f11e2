"""The columns and finishing rules of a live minute row (table ``live_minutes``,
docs/metrics.md#live-figures): the minute table's columns plus what the read side needs to
apply run-level rules (queue reports, retry evidence, queue and sag seconds, the cap used).

Rows keep raw values where the batch table applies run-level rules, which the read side
applies over the whole run: ``retries`` is a count (null when no attempt of the run
supports a retry figure), queue depth is a number for every shard (null for shards that
never reported a queue wait), and ``concurrency_cap`` is the largest cap declared by the
shard's attempts ending in the minute (the run's cap per shard is the largest of all).
"""

from __future__ import annotations

import polars as pl

from tpmledger.analytics.kernels.event_plans import derived_counts, rate_columns
from tpmledger.analytics.kernels.minute_schema import (
    MINUTE_FIGURE_SCHEMA,
    ROUNDED_FIGURES,
    SIGNIFICANT_DIGITS,
    ZERO_WHEN_EMPTY,
)
from tpmledger.storage.schema.minute_columns import MINUTE_COLUMNS

# Columns of a live row beyond the minute table's (storage.schema.models.LiveMinute).
EXTRA_COLUMNS = (
    "queue_reports",
    "retry_evidence",
    "queue_seconds",
    "sag_seconds",
    "sag_cap",
)
# The extra columns that count (0 when nothing was counted).
EXTRA_COUNTS = ("queue_reports", "queue_seconds", "sag_seconds")


LIVE_ROW_SCHEMA: dict[str, pl.DataType] = {
    **MINUTE_FIGURE_SCHEMA,
    "queue_reports": pl.Int64(),
    "retry_evidence": pl.Boolean(),
    "queue_seconds": pl.Int64(),
    "sag_seconds": pl.Int64(),
    "sag_cap": pl.Int32(),
}
_ZERO_FILLED = (*ZERO_WHEN_EMPTY, *EXTRA_COUNTS)


def finished_rows(table: pl.DataFrame) -> pl.DataFrame:
    """Missing columns added, absent counts and samples as 0, rates, rounding, order."""
    for name, dtype in LIVE_ROW_SCHEMA.items():
        if name not in table.columns:
            table = table.with_columns(pl.lit(None, dtype=dtype).alias(name))
    table = table.with_columns(
        *(pl.col(n).cast(LIVE_ROW_SCHEMA[n]).fill_null(0) for n in _ZERO_FILLED),
        pl.col("retry_evidence").fill_null(False),
    ).with_columns(derived_counts())
    table = table.with_columns(rate_columns())
    table = table.with_columns(pl.col(ROUNDED_FIGURES).round_sig_figs(SIGNIFICANT_DIGITS))
    columns = [c if c != "minute_utc" else "minute_ns" for c in MINUTE_COLUMNS]
    return table.select(*columns, *EXTRA_COLUMNS).sort("shard_id", "minute_ns")
