"""Per-minute extras of touched minutes (docs/operations.md#per-run-series): tokens of the
cache and reasoning types and failed attempts by error type, from the same window of
attempts the live minute rows come from, rollups left out.

A token type has a row only in minutes where some attempt reported it (not measured
otherwise); an error type has a row in minutes where it occurred.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from tpmledger.analytics.kernels.event_plans import MINUTE_NS

#: Column of the window -> token type of ``tpmledger_run_tokens_total``.
TOKEN_TYPES = {
    "cache_read_tokens": "cache_read",
    "cache_write_tokens": "cache_write",
    "reasoning_tokens": "reasoning",
}


def minute_extras(
    window: pl.DataFrame, minutes_ns: Sequence[int]
) -> list[tuple[int, str, str, int]]:
    """(minute_ns, kind, key, value) of the attempts ending in ``minutes_ns``."""
    # Only the columns read here are filtered (a busy minute's window is ~1 M rows).
    needed = ["rollup", "end_ns", "status", "error_type", *TOKEN_TYPES]
    events = (
        window.select(needed)
        .filter(pl.col("rollup") == 0)
        .with_columns(minute_ns=(pl.col("end_ns") // MINUTE_NS) * MINUTE_NS)
    )
    events = events.filter(
        pl.col("minute_ns").is_in(pl.Series(list(minutes_ns), dtype=pl.Int64).implode())
    )
    rows: list[tuple[int, str, str, int]] = []
    for column, token_type in TOKEN_TYPES.items():
        reported = events.filter(pl.col(column).is_not_null())
        for minute_ns, value in (
            reported.group_by("minute_ns").agg(pl.col(column).sum()).sort("minute_ns").rows()
        ):
            rows.append((int(minute_ns), "tokens", token_type, int(value)))
    failed = events.filter(pl.col("status") == "error").with_columns(
        pl.col("error_type").fill_null("error")
    )
    for minute_ns, error_type, count in (
        failed.group_by("minute_ns", "error_type").len().sort("minute_ns", "error_type").rows()
    ):
        rows.append((int(minute_ns), "errors", str(error_type), int(count)))
    return rows
