"""/metrics' per-run figures (docs/operations.md#per-run-series) against the read API's
minute rows, on a real PostgreSQL: live, sealed, and sealed-then-live runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, MINUTE_NS, attempt_row
from tpmledger.analytics.kernels.figure_rules import is_retry_storm_minute
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.analytics.views.current_table import current_table
from tpmledger.analytics.views.live_view import live_figures
from tpmledger.analytics.views.run_series import RunSeries, SealedCache, run_series
from tpmledger.storage.schema.models import ATTEMPT_COPY_COLUMNS as COLUMNS
from tpmledger.storage.server.database import in_one_snapshot

SECOND_NS = 1_000_000_000
BASE = datetime.fromtimestamp(BASE_NS / 1e9, UTC)


def _attempt(run: str, shard: str, minute: int, *, resend: int | None = 0, **fields: object):
    end = BASE_NS + minute * MINUTE_NS + 30 * SECOND_NS
    return attempt_row(
        run_id=run,
        shard_id=shard,
        start_ns=end - 2 * SECOND_NS,
        end_ns=end,
        resend_count=resend,
        ttft_s=0.25,
        **fields,
    )


def _series(url: str, now: datetime, window_s: float = 3600.0) -> dict[str, RunSeries]:
    found = in_one_snapshot(url, run_series, window_s=window_s, close_after_s=120.0, now=now)
    return {s.run_id: s for s in found}


def _fleet(run: str, minutes: int, *, silent_shard_stops_at: int | None = None) -> list:
    rows = []
    for minute in range(minutes):
        for shard in ("0", "1"):
            if (
                shard == "1"
                and silent_shard_stops_at is not None
                and minute >= silent_shard_stops_at
            ):
                continue
            rows += [_attempt(run, shard, minute) for _ in range(4)]
    return rows


def test_live_run_figures_equal_the_read_apis_rows(database_url: str) -> None:
    rows = _fleet("live-run", 10)
    # Cache reads on some attempts; reasoning and cache writes reported by none.
    rows += [_attempt("live-run", "0", m, cache_read_tokens=40) for m in range(3)]
    # A rollup (an LLM span whose child is an LLM span too) counts nowhere.
    parent = _attempt("live-run", "1", 2, cache_read_tokens=1000, status="error", error_type="x")
    trace, span = parent[COLUMNS.index("trace_id")], parent[COLUMNS.index("span_id")]
    rows += [parent, _attempt("live-run", "1", 2, trace_id=trace, parent_span_id=span)]
    # Minute 7 is a storm: 4 first attempts and 3 retries per shard (3 / 4 > 0.2).
    rows += [
        _attempt(
            "live-run",
            s,
            7,
            resend=1,
            status="error",
            error_type="http_429",
            prompt_tokens=0,
            completion_tokens=0,
        )
        for s in ("0", "1")
        for _ in range(3)
    ]
    store(database_url, rows)
    LiveUpdater(database_url).update_once()
    # Minutes 0..9 exist; with a 120 s close, at 03:54:10 + 2 min minute 7 is the newest closed.
    now = BASE + timedelta(minutes=10, seconds=10)
    series = _series(database_url, now)["live-run"]

    table = in_one_snapshot(database_url, current_table, "live-run", close_after_s=120.0, now=now)
    assert table is not None
    whole = {r["minute_utc"]: r for r in table.shard_rows("*")}
    newest = max(m for m, r in whole.items() if r["state"] != "open")
    assert series.minute_utc == newest == BASE + timedelta(minutes=7)
    row = whole[newest]
    assert series.minute_tpm == {
        "total": row["tpm_total"],
        "prompt": row["prompt_tpm_in"],
        "completion": row["completion_tpm_out"],
    }
    assert series.minute_retry_rate == row["retry_rate"]
    assert series.minute_ttft_p95_s == row["ttft_p95_s"]
    assert series.minute_in_flight_mean == row["in_flight_mean"]
    assert series.concurrency_cap == row["concurrency_cap"] == 32
    assert series.retry_storm is True
    assert is_retry_storm_minute(row["calls_in_minute"], row["retries"])

    figures = live_figures(table)
    assert series.input_tokens == figures["tokens"]["prompt"]
    assert series.output_tokens == figures["tokens"]["completion"]
    assert series.successes + series.failures == figures["attempts"]
    assert series.successes == 84 and series.failures == 6 and series.retries == 6
    assert series.other_tokens == {"cache_read": 120}
    assert series.errors == {"http_429": 6}
    assert series.live is True
    assert series.shards_silent == 0
    assert abs(series.data_age_s - (now.timestamp() - BASE_NS / 1e9 - 9.5 * 60)) < 1e-6


def test_a_shard_that_stops_reporting_is_silent(database_url: str) -> None:
    store(database_url, _fleet("quiet-shard", 12, silent_shard_stops_at=8))
    LiveUpdater(database_url).update_once()
    now = BASE + timedelta(minutes=12, seconds=10)  # newest closed: minute 9
    series = _series(database_url, now)["quiet-shard"]
    assert series.minute_utc == BASE + timedelta(minutes=9)
    assert series.shards_silent == 1
    # One minute later only shard 0 reported in the newest two minutes still: 1 silent.
    later = _series(database_url, now + timedelta(minutes=1))["quiet-shard"]
    assert later.shards_silent == 1


def test_retries_not_measured_leave_retry_series_out(database_url: str) -> None:
    store(database_url, [_attempt("no-retry-info", "0", m, resend=None) for m in range(5)])
    LiveUpdater(database_url).update_once()
    series = _series(database_url, BASE + timedelta(minutes=8))["no-retry-info"]
    assert series.minute_utc is not None
    assert series.retries is None
    assert series.minute_retry_rate is None
    assert series.retry_storm is None


@pytest.mark.slow
def test_window_keeps_live_runs_and_recent_sealed_runs(database_url: str) -> None:
    store(database_url, _fleet("sealed-run", 5))
    seal_run(database_url, "sealed-run", force=True)
    now = BASE + timedelta(minutes=30)
    series = _series(database_url, now)["sealed-run"]
    assert series.live is False
    # Every minute is sealed: the newest closed minute is the last one, whatever the clock.
    assert series.minute_utc == BASE + timedelta(minutes=4)
    assert series.input_tokens == 5 * 8 * 100
    # Outside the window a sealed run is left out; a live one never is.
    assert "sealed-run" not in _series(database_url, now, window_s=60)
    store(database_url, _fleet("live-old", 2))
    LiveUpdater(database_url).update_once()
    assert "live-old" in _series(database_url, now + timedelta(days=2), window_s=60)


def test_sealed_then_live_run_merges_rows_like_the_read_api(database_url: str) -> None:
    store(database_url, _fleet("checkpointed", 4))
    seal_run(database_url, "checkpointed", force=True)
    store(
        database_url,
        _fleet("checkpointed", 4)[:8] + [_attempt("checkpointed", "0", m) for m in (4, 5, 6)],
    )
    LiveUpdater(database_url).update_once()
    now = BASE + timedelta(minutes=9)
    series = _series(database_url, now)["checkpointed"]
    table = in_one_snapshot(
        database_url, current_table, "checkpointed", close_after_s=120.0, now=now
    )
    assert table is not None
    figures = live_figures(table)
    assert series.live is True
    assert series.input_tokens == figures["tokens"]["prompt"]
    assert series.successes == figures["attempts"]
    whole = {r["minute_utc"]: r for r in table.shard_rows("*")}
    assert series.minute_utc == BASE + timedelta(minutes=6)
    assert series.minute_tpm["total"] == whole[series.minute_utc]["tpm_total"]


def test_sealed_runs_are_read_once_until_new_data_arrives(database_url: str) -> None:
    store(database_url, _fleet("cached", 5))
    seal_run(database_url, "cached", force=True)
    cache = SealedCache()
    now = BASE + timedelta(minutes=30)

    def scrape(at: datetime) -> RunSeries:
        [found] = in_one_snapshot(database_url, run_series, window_s=3600, now=at, cache=cache)
        return found

    first = scrape(now)
    assert "cached" in cache.entries
    later = scrape(now + timedelta(seconds=30))
    assert later.input_tokens == first.input_tokens
    assert later.data_age_s == first.data_age_s + 30
    # New data makes the run live: read again, from the live rows too.
    store(database_url, [_attempt("cached", "0", 6)])
    LiveUpdater(database_url).update_once()
    fresh = scrape(now + timedelta(seconds=60))
    assert fresh.live is True
    assert fresh.input_tokens == first.input_tokens + 100
    assert "cached" not in cache.entries


def test_quota_headroom_per_target_of_the_newest_closed_minute(database_url: str) -> None:
    # Two targets: one with a declared token quota, one reporting only remaining counts
    # (no limit: no headroom, the series is left out for it).
    rows = []
    for minute in range(6):
        rows += [
            _attempt(
                "quota-run",
                "0",
                minute,
                provider="openai",
                model="gpt-x",
                prompt_tokens=300,
                completion_tokens=100,
                quota_tpm_declared=10_000.0,
                quota_rpm_declared=10.0,
            )
            for _ in range(4)
        ]
        rows.append(
            _attempt("quota-run", "1", minute, provider="anthropic", model="c-y",
                     ratelimit_remaining_tokens=5.0)
        )  # fmt: skip
    store(database_url, rows)
    LiveUpdater(database_url).update_once()
    now = BASE + timedelta(minutes=6, seconds=10)  # newest closed: minute 3
    series = _series(database_url, now)["quota-run"]
    assert series.minute_utc == BASE + timedelta(minutes=3)
    # Tokens: 1 - 1,600 / 10,000 = 0.84; requests: 1 - 4 / 10 = 0.6; the lower wins.
    assert series.headroom == {("openai", "gpt-x"): 0.6}
