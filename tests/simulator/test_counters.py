"""Fleet totals add up shards; derived figures are None where nothing was measured."""

from __future__ import annotations

from tpmledger.simulator.counters import ShardCounters, derived_figures, fleet_totals


def test_totals_sum_shards_and_merge_error_types() -> None:
    a = ShardCounters(attempts=10, attempts_ok=8, rate_limited=2, prompt_tokens=100, elapsed_s=30)
    a.count_error("429")
    a.count_error("429")
    b = ShardCounters(attempts=5, attempts_ok=5, completion_tokens=50, elapsed_s=31)
    b.count_error("timeout")
    total = fleet_totals([a, b])
    assert (total.attempts, total.attempts_ok, total.prompt_tokens) == (15, 13, 100)
    assert total.errors_by_type == {"429": 2, "timeout": 1}
    assert total.elapsed_s == 31
    assert ShardCounters.from_dict({**a.to_dict(), "unknown_key": 1}) == a


def test_derived_figures_honest_about_what_was_not_measured() -> None:
    empty = derived_figures(ShardCounters())
    assert all(value is None for value in empty.values())
    figures = derived_figures(
        ShardCounters(
            attempts=4, attempts_ok=3, retries=1, rate_limited=1, calls_ok=3, calls_failed=1,
            prompt_tokens=600, completion_tokens=300, spans_ended=4, elapsed_s=30.0,
        )
    )  # fmt: skip
    assert figures["tokens_per_minute_total"] == 1800
    assert figures["tokens_per_minute_completion"] == 600
    assert figures["spans_per_s"] == 4 / 30
    assert figures["call_success_rate"] == 0.75
    assert figures["retry_share"] == figures["rate_limited_share"] == 0.25
    assert figures["ttft_mean_s"] is None  # no stream reported a first chunk
