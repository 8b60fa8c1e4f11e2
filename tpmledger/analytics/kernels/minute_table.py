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

__all__ = ["MINUTE_COLUMNS", "SIGNIFICANT_DIGITS", "with_minute_utc"]

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


def with_minute_utc(table: pl.DataFrame) -> pl.DataFrame:
    """The table with ``minute_utc`` as a UTC datetime instead of ``minute_ns``."""
    return table.with_columns(
        minute_utc=pl.from_epoch(pl.col("minute_ns"), time_unit="ns").dt.replace_time_zone("UTC")
    ).select(MINUTE_COLUMNS)
