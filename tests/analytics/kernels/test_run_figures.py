"""Golden run figures: every number below is worked out by hand from golden_events.py."""

from __future__ import annotations

import polars as pl
import pytest

from tests.analytics.golden_events import CAPS, golden_events
from tpmledger.analytics.kernels.run_figures import RunContext, clean
from tpmledger.analytics.seal.memory_run import fold_events


def compute_run_figures(events: pl.DataFrame, context: RunContext | None = None) -> dict:
    """The product's figures: the streaming seal's walk over the events as one chunk."""
    return fold_events(events, context).figures


@pytest.fixture(scope="module")
def figures() -> dict:
    context = RunContext(caps=CAPS, declared_shard_count=2, concurrency_cap=1, sweep_id="sw")
    return compute_run_figures(golden_events(), context)


def test_counts_and_times(figures: dict) -> None:
    assert figures["run_id"] == "golden"
    assert figures["attempts"] == 8
    assert figures["logical_calls"] == 7
    assert figures["shard_count"] == 2
    assert figures["first_event_utc"] == "2026-02-01T03:44:10.000Z"
    assert figures["last_event_utc"] == "2026-02-01T03:48:10.000Z"
    assert figures["active_minutes"] == 4  # 03:46 is empty


def test_peaks_with_ties_to_the_earliest_minute(figures: dict) -> None:
    # 03:45 and 03:47 both have tpm_total 660; the earliest wins.
    assert figures["peak_minute"] == {
        "minute_utc": "2026-02-01T03:45:00Z",
        "shard_count": 2,
        "calls_in_minute": 2,
        "completion_tpm_out": 310,
        "prompt_tpm_in": 350,
        "tpm_total": 660,
    }
    assert figures["peak_completion_minute"] == {
        "minute_utc": "2026-02-01T03:48:00Z",
        "shard_count": 1,
        "calls_in_minute": 2,
        "completion_tpm_out": 400,
        "prompt_tpm_in": 10,
        "tpm_total": 410,
    }


def test_sustained_is_median_of_inner_minutes(figures: dict) -> None:
    # inner minutes 03:45 (660), 03:46 (0), 03:47 (660) -> median 660
    assert figures["sustained_tpm_total"] == 660


def test_rates_and_retry_causes(figures: dict) -> None:
    assert figures["attempt_success_rate"] == 0.75  # 6 of 8
    assert figures["call_success_rate"] == clean(6 / 7)  # c5 ends in a timeout
    assert figures["retry_rate"] == 0.125  # e4 of 8
    assert figures["retry_causes"] == {"rate_limit": 1}  # e3 was retried; e8 was not


def test_ttft_percentiles_linear_over_successful_attempts(figures: dict) -> None:
    # ok attempts with TTFT: 0.1 0.2 0.3 0.4 0.5
    assert figures["ttft_s"] == {
        "p50": 0.3,
        "p95": 0.48,
        "p99": 0.496,
        "mean": 0.3,
        "variance": 0.02,
    }


def test_shard_balance_tokens_and_latency(figures: dict) -> None:
    # shard a: 150 + 360 + 410 = 920 tokens, shard b: 300 + 300 + 660 = 1260
    assert figures["shard_balance"] == {
        "shares": {"a": clean(920 / 2180), "b": clean(1260 / 2180)},
        "imbalance": clean((1260 / 2180) / 0.5),
    }
    assert figures["tokens"] == {"prompt": 1010, "completion": 1170, "total": 2180}
    assert figures["latency_s"]["p50"] == 16.5  # 10 15 15 15 18 22 25 30


def test_work_conserving_sag(figures: dict) -> None:
    # Queue on shard a at seconds 30..39 (e4, nothing in flight: sag) and 225..229
    # (e7; e8 holds the one slot from 228): 15 queued seconds, 13 sagging.
    assert figures["work_conserving"] == {
        "sag_share": clean(13 / 15),
        "seconds_with_queue": 15,
        "passes": False,
        "threshold": 0.05,
        "sag_below_fraction_of_cap": 0.9,
    }
    assert figures["declared_shard_count"] == 2 and figures["sweep_id"] == "sw"


def test_not_measured_is_null_never_zero() -> None:
    events = golden_events(resend_count=None, ttft_s=None, queue_wait_s=None).with_columns(
        call_id=pl.col("span_id")
    )
    figures = compute_run_figures(events, RunContext(caps=CAPS))
    assert figures["retry_rate"] is None
    assert figures["retry_causes"] is None
    assert figures["ttft_s"] == {
        "p50": None,
        "p95": None,
        "p99": None,
        "mean": None,
        "variance": None,
    }
    assert figures["work_conserving"]["sag_share"] is None
    assert figures["work_conserving"]["passes"] is None
    # implicit call ids: every attempt is its own call
    assert figures["logical_calls"] == 8 and figures["call_success_rate"] == 0.75


def test_resend_count_alone_measures_retries_but_not_causes() -> None:
    events = golden_events().with_columns(call_id=pl.col("span_id"))
    figures = compute_run_figures(events)
    assert figures["retry_rate"] == 0.125
    assert figures["retry_causes"] is None  # a retry cannot be linked to its failed attempt


def test_attempt_order_is_inferred_from_start_time_without_resend_count() -> None:
    figures = compute_run_figures(golden_events(resend_count=None))
    # c3 = e3 (start 12) then e4 (start 40): e4 is the one retry
    assert figures["retry_rate"] == 0.125
    assert figures["retry_causes"] == {"rate_limit": 1}


def test_no_events_gives_nulls() -> None:
    figures = compute_run_figures(golden_events().head(0))
    assert figures["attempts"] == 0
    assert figures["peak_minute"] is None and figures["sustained_tpm_total"] is None
    assert figures["attempt_success_rate"] is None and figures["retry_rate"] is None
