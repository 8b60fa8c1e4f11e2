"""The figures behind ``/metrics``' per-run series (docs/operations.md#per-run-series).

For every live run and every run whose last event is inside the window, read in one
snapshot from minute rows (sealed and live, merged as :mod:`analytics.views.current_table`
merges them; never raw spans): the run's token, attempt and retry counts, the whole-run
row of its newest **closed** minute, its declared cap, whether that minute is a
retry-storm minute (the diagnostics' rule, docs/metrics.md#diagnostics), its silent
shards, whether it is live, and how old its newest event is.

``None`` means not measured: the series is left out, never written as 0. Plain Python
over a few rows per run: this runs in the ingest process (no Polars).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from tpmledger.analytics.kernels.figure_rules import clean, is_retry_storm_minute
from tpmledger.analytics.kernels.quota_headroom import headroom_requests, headroom_tokens
from tpmledger.analytics.kernels.run_level import ratio
from tpmledger.storage.readers.live_read import RunState, run_states_in_window
from tpmledger.storage.readers.run_metrics_read import (
    NewestMinute,
    RunKey,
    ShardCaps,
    WholeRunTotals,
    extra_totals,
    newest_minutes,
    shard_caps,
    whole_run_totals,
)
from tpmledger.storage.readers.target_minutes import target_minutes_ending_from

MINUTE = timedelta(minutes=1)
#: Shards silent: reported in the last ``SILENT_LOOKBACK`` closed minutes, not in the newest
#: ``SILENT_RECENT`` while other shards did.
SILENT_LOOKBACK = 10
SILENT_RECENT = 2


@dataclass
class RunSeries:
    """One run's series values; ``None`` = not measured (left out of the exposition)."""

    run_id: str
    live: bool
    data_age_s: float
    input_tokens: int | None = None
    output_tokens: int | None = None
    # cache_read / cache_write / reasoning: only the types some attempt reported
    other_tokens: dict[str, int] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)  # failed attempts by error type
    successes: int | None = None
    failures: int | None = None
    retries: int | None = None
    minute_utc: datetime | None = None  # the newest closed minute
    minute_tpm: dict[str, int] = field(default_factory=dict)  # total / prompt / completion
    minute_retry_rate: float | None = None
    minute_ttft_p95_s: float | None = None
    minute_in_flight_mean: float | None = None
    retry_storm: bool | None = None
    shards_silent: int | None = None
    concurrency_cap: int | None = None
    # (provider, model) -> the lower of token and request headroom in the newest closed
    # minute (docs/metrics.md#quota-headroom); a target without a quota is left out.
    headroom: dict[tuple[str, str], float] = field(default_factory=dict)


def newest_closed_minute(
    totals: WholeRunTotals, now: datetime, close_after_s: float
) -> datetime | None:
    """The newest minute of the run's table that is closed or sealed (None: no minute yet).

    The table spans the first to the last minute with an attempt ending in it; a minute
    closes ``close_after_s`` after it ends (docs/metrics.md#live-figures), a sealed one is
    closed already."""
    if totals.first_active is None or totals.last_active is None:
        return None
    closes_by = now - MINUTE - timedelta(seconds=close_after_s)
    by_clock = closes_by.replace(second=0, microsecond=0)
    candidates = [min(by_clock, totals.last_active)]
    if totals.last_sealed is not None:
        candidates.append(min(totals.last_sealed, totals.last_active))
    newest = max(candidates)
    return newest if newest >= totals.first_active else None


def _cap(caps: ShardCaps | None) -> int | None:
    """The whole run's cap as the minute table states it: the sum of each shard's largest,
    plus what the snapshot's whole-run cap counted for shards it lists no rows of."""
    if caps is None:
        return None
    hidden = 0
    if caps.sealed_whole is not None:
        named = sum(caps.sealed_caps.get(s, c) for s, c in caps.caps.items())
        hidden = max(caps.sealed_whole - named, 0)
    if not caps.caps and not hidden:
        return None
    return sum(caps.caps.values()) + hidden


class SealedCache:
    """Series of runs that are not live, kept between scrapes: a sealed run's minute table
    does not change until new data arrives (which makes it live again, or changes its
    newest snapshot), so its figures are read once. Only the data age is recomputed."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[tuple[object, ...], RunSeries]] = {}

    @staticmethod
    def key(state: RunState) -> tuple[object, ...]:
        return (state.snapshot_version, state.updated_at, state.live_rows, state.archived_at)

    def get(self, state: RunState) -> RunSeries | None:
        found = self.entries.get(state.run_id)
        if found is None or found[0] != self.key(state) or state.is_live:
            return None
        return found[1]

    def keep(self, states: list[RunState], series: dict[str, RunSeries]) -> None:
        """Keep the series of the runs of ``states`` that are not live (others are dropped)."""
        self.entries = {s.run_id: (self.key(s), series[s.run_id]) for s in states if not s.is_live}


def run_series(
    session: Session,
    *,
    window_s: float,
    close_after_s: float = 120.0,
    now: datetime | None = None,
    cache: SealedCache | None = None,
) -> list[RunSeries]:
    """Series values of every run ``/metrics`` reports, in run id order (``cache`` keeps
    the figures of sealed runs between calls)."""
    now = now or datetime.now(UTC)
    since_ns = int((now.timestamp() - window_s) * 1e9)
    states = run_states_in_window(session, since_ns)
    cached = {s.run_id: hit for s in states if cache and (hit := cache.get(s)) is not None}
    todo = [s for s in states if s.run_id not in cached]
    keys = [RunKey(s.run_id, s.snapshot_version) for s in todo]
    totals = whole_run_totals(session, keys)
    caps = shard_caps(session, keys)
    newest = {
        s.run_id: newest_closed_minute(totals[s.run_id], now, close_after_s)
        for s in todo
        if s.run_id in totals
    }
    window = [
        RunKey(s.run_id, s.snapshot_version, m - (SILENT_LOOKBACK - 1) * MINUTE, m)
        for s in todo
        if (m := newest.get(s.run_id)) is not None
    ]
    minutes = newest_minutes(session, window, SILENT_RECENT)
    extras = extra_totals(session, [s.run_id for s in todo])
    series = {
        s.run_id: _series(
            s,
            totals.get(s.run_id),
            caps.get(s.run_id),
            newest.get(s.run_id),
            minutes.get(s.run_id),
            now,
        )
        for s in todo
    }
    for run_id, ratios in _headroom(session, newest).items():
        series[run_id].headroom = ratios
    for run_id, sums in extras.items():
        series[run_id].other_tokens = {k: v for (kind, k), v in sums.items() if kind == "tokens"}
        series[run_id].errors = {k: v for (kind, k), v in sums.items() if kind == "errors"}
    for s in states:
        if s.run_id in cached:
            series[s.run_id] = replace(cached[s.run_id], data_age_s=_age(s, now))
    if cache is not None:
        cache.keep(states, series)
    return [series[s.run_id] for s in states]


def _headroom(
    session: Session, newest: dict[str, datetime | None]
) -> dict[str, dict[tuple[str, str], float]]:
    """Each run's targets' headroom in its newest closed minute: the lower of 1 − used /
    quota for tokens and for requests, where a quota is known. One query per distinct
    minute (live runs share the clock's), reading from that minute's attempts on."""
    by_minute: dict[datetime, list[str]] = {}
    for run_id, minute in newest.items():
        if minute is not None:
            by_minute.setdefault(minute, []).append(run_id)
    found: dict[str, dict[tuple[str, str], float]] = {}
    for minute, run_ids in by_minute.items():
        minute_ns = int(minute.timestamp()) * 1_000_000_000
        for target in target_minutes_ending_from(session, sorted(run_ids), minute_ns):
            if target.minute_ns != minute_ns:
                continue
            known = [
                h for h in (headroom_tokens(target), headroom_requests(target)) if h is not None
            ]
            if known:
                key = (target.provider or "", target.model or "")
                found.setdefault(target.run_id, {})[key] = clean(min(known))
    return found


def _age(state: RunState, now: datetime) -> float:
    return max(now.timestamp() - state.last_event_ns / 1e9, 0.0)


def _series(
    state: RunState,
    totals: WholeRunTotals | None,
    caps: ShardCaps | None,
    newest: datetime | None,
    found: NewestMinute | None,
    now: datetime,
) -> RunSeries:
    series = RunSeries(
        run_id=state.run_id,
        live=state.is_live,
        data_age_s=_age(state, now),
        concurrency_cap=_cap(caps),
    )
    if totals is None:
        return series  # no minute row yet: nothing measured but liveness and age
    series.input_tokens = totals.prompt_tokens
    series.output_tokens = totals.completion_tokens
    series.successes = totals.successes
    series.failures = totals.failures
    series.retries = totals.retries if totals.retry_evidence else None
    if newest is None:
        return series
    whole = found.whole if found else None
    series.minute_utc = newest
    calls = whole.calls_in_minute if whole else 0
    retries = (whole.retries or 0) if whole else 0
    series.minute_tpm = {
        "total": whole.tpm_total if whole else 0,
        "prompt": whole.prompt_tpm_in if whole else 0,
        "completion": whole.completion_tpm_out if whole else 0,
    }
    if totals.retry_evidence:
        series.minute_retry_rate = clean(ratio(retries, calls))
        series.retry_storm = is_retry_storm_minute(calls, retries)
    if whole is not None:
        series.minute_ttft_p95_s = whole.ttft_p95_s
        series.minute_in_flight_mean = whole.in_flight_mean
    else:
        series.minute_in_flight_mean = 0.0  # an empty minute inside the run, as current_table
    # Silent: reported in the lookback, not in the newest minutes, while others did (0
    # when no shard reported lately: the whole run is quiet, not one shard).
    if found is not None and found.shards_recent:
        series.shards_silent = found.shards_reporting - found.shards_recent
    else:
        series.shards_silent = 0
    return series
