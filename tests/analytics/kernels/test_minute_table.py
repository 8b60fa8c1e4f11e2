"""Golden minute tables (whole run and per shard) checked with assert_frame_equal."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
from polars.testing import assert_frame_equal

from tests.analytics.golden_events import CAPS, golden_events
from tpmledger.analytics.kernels.minute_table import MINUTE_COLUMNS, with_minute_utc
from tpmledger.analytics.kernels.run_figures import RunContext
from tpmledger.analytics.seal.memory_run import fold_events


def compute_minutes(events: pl.DataFrame, caps: dict[str, int] | None = None) -> pl.DataFrame:
    """The product's minute table: the streaming seal's walk over the events as one chunk."""
    return with_minute_utc(fold_events(events, RunContext(caps=caps or {})).minutes)


MINUTES = [datetime(2026, 2, 1, 3, m, tzinfo=UTC) for m in range(44, 49)]
COUNTS = [
    "minute_utc", "calls_in_minute", "prompt_tpm_in", "completion_tpm_out", "tpm_total",
    "successes", "failures", "retries", "retry_rate", "success_rate", "shards_active",
]  # fmt: skip


def _expected(columns: dict[str, list[object]], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    return pl.DataFrame(columns, schema=schema)


def test_whole_run_counts_and_rates() -> None:
    table = compute_minutes(golden_events(), CAPS)
    assert table.columns == list(MINUTE_COLUMNS)
    whole = table.filter(pl.col("shard_id") == "*").select(COUNTS)
    expected = _expected(
        {
            "minute_utc": MINUTES,
            "calls_in_minute": [3, 2, 0, 1, 2],
            "prompt_tpm_in": [300, 350, 0, 350, 10],
            "completion_tpm_out": [150, 310, 0, 310, 400],
            "tpm_total": [450, 660, 0, 660, 410],
            "successes": [2, 2, 0, 1, 1],
            "failures": [1, 0, 0, 0, 1],
            "retries": [0, 1, 0, 0, 0],
            "retry_rate": [0.0, 0.5, None, 0.0, 0.0],
            "success_rate": [round(2 / 3, 12), 1.0, None, 1.0, 0.5],
            "shards_active": [2, 2, 0, 1, 1],
        },
        whole.schema,  # type: ignore[arg-type]
    )
    assert_frame_equal(whole, expected)


def test_per_shard_rows_cover_the_minutes_the_shard_was_busy() -> None:
    table = compute_minutes(golden_events(), CAPS)
    shard_b = table.filter(pl.col("shard_id") == "b").select(
        "minute_utc", "calls_in_minute", "tpm_total", "shards_active", "concurrency_cap"
    )
    # Shard b's attempts: 0:05-0:20, 1:05-1:30, 2:50-3:05. Minute 46 has no attempt
    # ending but one in flight, so it has a row; minute 48 has nothing and is implicit.
    expected = _expected(
        {
            "minute_utc": MINUTES[:4],
            "calls_in_minute": [1, 1, 0, 1],
            "tpm_total": [300, 300, 0, 660],
            "shards_active": [1, 1, 0, 1],
            "concurrency_cap": [1, 1, 1, 1],
        },
        shard_b.schema,  # type: ignore[arg-type]
    )
    assert_frame_equal(shard_b, expected)
    assert table.get_column("shard_id").unique().sort().to_list() == ["*", "a", "b"]


def test_ttft_percentiles_per_minute() -> None:
    table = compute_minutes(golden_events())
    ttft = table.filter(pl.col("shard_id") == "*").select(
        "ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "ttft_mean_s", "ttft_variance_s2"
    )
    expected = _expected(
        {
            # 03:44: 0.1 and 0.3; 03:45: 0.5 and 0.2; 03:47: 0.4; 03:48: e7 reports none
            "ttft_p50_s": [0.2, 0.35, None, 0.4, None],
            "ttft_p95_s": [0.29, 0.485, None, 0.4, None],
            "ttft_p99_s": [0.298, 0.497, None, 0.4, None],
            "ttft_mean_s": [0.2, 0.35, None, 0.4, None],
            "ttft_variance_s2": [0.01, 0.0225, None, 0.0, None],
        },
        ttft.schema,  # type: ignore[arg-type]
    )
    assert_frame_equal(ttft, expected)


def test_in_flight_and_queue_depth_sampled_each_second() -> None:
    table = compute_minutes(golden_events(), CAPS)
    first = table.filter(pl.col("minute_utc") == MINUTES[0]).select(
        "shard_id", "in_flight_mean", "in_flight_max", "queue_depth_mean", "queue_depth_max"
    )
    # 03:44 samples: e1 10 s, e2 15 s, e3 18 s, e4 20 s (40..59) in flight;
    # e4 queued 30..39 on shard a; shard b never reports queue_wait_s -> null.
    expected = _expected(
        {
            "shard_id": ["*", "a", "b"],
            "in_flight_mean": [63 / 60, 48 / 60, 15 / 60],
            "in_flight_max": [2, 1, 1],
            "queue_depth_mean": [10 / 60, 10 / 60, None],
            "queue_depth_max": [1, 1, None],
        },
        first.schema,  # type: ignore[arg-type]
    )
    assert_frame_equal(first, expected)


def test_retries_not_measured_are_null_in_every_minute() -> None:
    events = golden_events(resend_count=None).with_columns(call_id=pl.col("span_id"))
    table = compute_minutes(events)
    assert table.get_column("retries").null_count() == table.height
    assert table.get_column("retry_rate").null_count() == table.height
    assert table.get_column("queue_depth_max").null_count() < table.height
