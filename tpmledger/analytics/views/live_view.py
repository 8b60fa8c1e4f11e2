"""A run's current figures: sealed where nothing changed, live where new data arrived.

The current minute table is the newest snapshot's rows with every minute that has live
rows taken from the live minute table instead, and minutes nobody touched filled with
empty rows (docs/metrics.md#live-figures). The batch table's run-wide rules are applied
here, over the merged rows, so the result equals what a seal would compute now:

- ``retries`` is null in every row unless some attempt of the run supports a retry
  figure (a resend count or an explicit call id);
- queue depth is null for shards that never reported a queue wait (and for ``*`` when
  none did);
- ``concurrency_cap`` is the shard's largest declared cap, ``*`` their sum.

Each row carries ``state``: ``sealed`` (from the snapshot), else ``open`` until
``close_after_s`` after the minute ends, then ``closed``.

Plain Python over a few thousand rows: this runs in the read API's process, which must
stay small (no Polars).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from tpmledger.analytics.kernels import value_sketch
from tpmledger.analytics.kernels.figure_rules import (
    DEFAULT_RETRY_BUDGET,
    clean,
    retry_storm_result,
    work_conserving_result,
)
from tpmledger.analytics.kernels.run_span_limit import MAX_RUN_MINUTES, check_run_minutes
from tpmledger.storage.live_read import (
    RunState,
    live_minute_rows,
    live_run_minute_rows,
    run_state,
    sealed_minute_rows,
    sealed_minute_span,
    sealed_shard_row,
)
from tpmledger.storage.minute_columns import EMPTY_FIGURES
from tpmledger.storage.minute_keys import WHOLE_RUN
from tpmledger.storage.minute_versions import MINUTE_ROW_COLUMNS
from tpmledger.storage.time_text import minute_text, ns_to_rfc3339, utc_ms_or_none

MINUTE = timedelta(minutes=1)
_COUNTS = (
    "calls_in_minute",
    "prompt_tpm_in",
    "completion_tpm_out",
    "tpm_total",
    "successes",
    "failures",
    "shards_active",
)
_NULLS = (
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
)
#: States whose minutes no longer change (except through late data): peak minutes and
#: sustained TPM of a live run are taken from these only (docs/metrics.md#open-minutes).
SETTLED = ("closed", "sealed")


class UnknownShard(LookupError):
    """The run has no rows of the shard asked for."""


@dataclass(frozen=True)
class MinuteWindow:
    """The minutes a reader asks for (``GET /v1/runs/{run_id}/minutes?from=&to=&limit=``):
    from ``start`` to ``end`` (whole minutes, inclusive; None: the run's first / last),
    at most ``limit`` of them. Rows are made for these minutes only."""

    start: datetime | None = None
    end: datetime | None = None
    limit: int = MAX_RUN_MINUTES

    def minutes(self, first: datetime, last: datetime) -> list[datetime]:
        """The window's minutes within ``first`` .. ``last``, in order."""
        low = first if self.start is None else max(first, self.start)
        high = last if self.end is None else min(last, self.end)
        if low > high:
            return []
        count = min(self.limit, (high - low) // MINUTE + 1)
        return [low + i * MINUTE for i in range(count)]


def _empty_row(shard_id: str, minute: datetime) -> dict[str, Any]:
    row: dict[str, Any] = {"shard_id": shard_id, "minute_utc": minute}
    row |= dict.fromkeys(_COUNTS, 0) | dict.fromkeys(_NULLS)
    row |= {"retries": 0, "in_flight_mean": 0.0, "in_flight_max": 0}
    row |= {"queue_depth_mean": 0.0, "queue_depth_max": 0, "concurrency_cap": None}
    return row


@dataclass
class CurrentTable:
    """The merged minute table of one run (rows by shard, then minute).

    Rows are made one shard at a time, when asked for (:meth:`shard_rows`): the stored
    rows are kept as they are (a row per shard and minute that has one), and a minute
    without one is an empty row made on the way. So a run whose few attempts lie weeks
    apart costs the rows asked for, not shards × minutes at once.
    """

    state: RunState
    live: bool
    data_as_of: datetime | None
    retries_measured: bool
    caps: dict[str, int]
    queue_shards: set[str]
    work_conserving: dict[str, Any] = field(default_factory=dict)
    sealed_minutes: int = 0  # minutes taken from the newest snapshot
    # Per-minute run facts (storage.live_read.live_run_minute_rows), every minute's.
    run_facts: list[dict[str, Any]] = field(default_factory=list)
    hidden_cap: int = 0  # caps of shards the snapshot's '*' counts but lists no rows of
    # What the rows are made from (set by merge_tables).
    minutes: list[datetime] = field(default_factory=list)
    called: list[str] = field(default_factory=list)  # shards with calls, sorted
    stored: dict[str, dict[datetime, dict[str, Any]]] = field(default_factory=dict)
    live_minutes: set[datetime] = field(default_factory=set)
    now: datetime = field(default_factory=lambda: datetime.now(UTC))
    close_after_s: float = 120.0

    def shard_rows(self, shard_id: str, window: MinuteWindow | None = None) -> list[dict[str, Any]]:
        """One shard's (or ``*``'s) rows, first minute to last (or the ``window``'s
        minutes); none for another shard. A minute without a stored row is empty; it is
        sealed when the snapshot's whole-run row of that minute is."""
        if shard_id != WHOLE_RUN and shard_id not in self.called:
            return []
        stored = self.stored.get(shard_id, {})
        whole = self.stored.get(WHOLE_RUN, {})
        minutes = (
            self.minutes
            if window is None or not self.minutes
            else (window.minutes(self.minutes[0], self.minutes[-1]))
        )
        rows = []
        for minute in minutes:
            source = stored.get(minute)
            row = dict(source) if source is not None else _empty_row(shard_id, minute)
            sealed_source = source if source is not None else whole.get(minute)
            is_sealed = (
                sealed_source is not None
                and not sealed_source.get("_live")
                and minute not in self.live_minutes
            )
            rows.append(_apply_rules(self, row, shard_id, is_sealed, self.now, self.close_after_s))
        return rows

    @property
    def rows(self) -> list[dict[str, Any]]:
        """Every row: each shard's, then the whole run's (made whole: prefer shard_rows)."""
        if not self.minutes:
            return []
        return [row for shard in [*self.called, WHOLE_RUN] for row in self.shard_rows(shard)]

    @property
    def shard_ids(self) -> list[str]:
        return list(self.called) if self.minutes else []

    def shard_tokens(self, shard_id: str) -> int:
        """Prompt + completion tokens of a shard's rows (empty minutes hold none)."""
        if not self.minutes or shard_id not in self.called:
            return 0
        first, last = self.minutes[0], self.minutes[-1]
        return sum(
            int(r["prompt_tpm_in"]) + int(r["completion_tpm_out"])
            for minute, r in self.stored.get(shard_id, {}).items()
            if first <= minute <= last
        )


def _state_of(minute: datetime, sealed: bool, now: datetime, close_after_s: float) -> str:
    if sealed:
        return "sealed"
    closes = minute + MINUTE + timedelta(seconds=close_after_s)
    return "open" if now < closes else "closed"


def current_table(
    session: Session, run_id: str, *, close_after_s: float = 120.0, now: datetime | None = None
) -> CurrentTable | None:
    """The run's current minute table, or None for an unknown run."""
    state = run_state(session, run_id)
    if state is None:
        return None
    now = now or datetime.now(UTC)
    sealed = (
        sealed_minute_rows(session, run_id, state.snapshot_version)
        if state.snapshot_version
        else []
    )
    live = live_minute_rows(session, run_id) if state.live_rows else []
    facts = live_run_minute_rows(session, run_id)
    return merge_tables(state, sealed, live, close_after_s=close_after_s, now=now, facts=facts)


def merge_tables(
    state: RunState,
    sealed: list[dict[str, Any]],
    live: list[dict[str, Any]],
    *,
    close_after_s: float,
    now: datetime,
    facts: list[dict[str, Any]] | None = None,
) -> CurrentTable:
    """Overlay ``live`` rows on ``sealed`` rows minute by minute and apply the rules;
    ``facts`` are the run's per-minute run facts (run-level live figures)."""
    live_minutes = {r["minute_utc"] for r in live if r["shard_id"] == WHOLE_RUN}
    chosen = [r for r in sealed if r["minute_utc"] not in live_minutes]
    chosen += [{**r, "_live": True} for r in live]
    whole = {r["minute_utc"]: r for r in chosen if r["shard_id"] == WHOLE_RUN}
    active = sorted(m for m, r in whole.items() if r["calls_in_minute"] > 0)
    table = CurrentTable(
        state=state,
        live=state.has_new_data,
        # What the rows reflect: the newest ingest commit the live rows saw (the live
        # table may be a moment behind the newest commit), else the snapshot's.
        data_as_of=max(
            [r["data_as_of"] for r in live]
            + ([state.snapshot_data_as_of] if state.snapshot_data_as_of else []),
            default=None,
        ),
        retries_measured=any(
            r.get("retry_evidence") if r.get("_live") else r["retries"] is not None for r in chosen
        ),
        caps={},
        queue_shards=set(),
        run_facts=facts or [],
    )
    caps: dict[str, int] = {}
    called: set[str] = set()
    for r in chosen:
        shard = r["shard_id"]
        if shard == WHOLE_RUN:
            continue
        if r["calls_in_minute"] > 0:
            called.add(shard)
        if r["concurrency_cap"] is not None:
            caps[shard] = max(caps.get(shard, 0), r["concurrency_cap"])
        reported = r["queue_reports"] > 0 if r.get("_live") else r["queue_depth_mean"] is not None
        if reported:
            table.queue_shards.add(shard)
    table.caps = caps  # every shard's, rollup-only ones too (the '*' cap sums them)
    # A snapshot keeps no rows for shards whose attempts are all rollups, but its '*' cap
    # counts their caps: carry that part over (shards seen live are counted by name).
    sealed_star = [
        r["concurrency_cap"]
        for r in chosen
        if r["shard_id"] == WHOLE_RUN and not r.get("_live") and r["concurrency_cap"] is not None
    ]
    sealed_caps: dict[str, int] = {}
    for r in chosen:
        if not r.get("_live") and r["shard_id"] != WHOLE_RUN and r["concurrency_cap"]:
            shard = r["shard_id"]
            sealed_caps[shard] = max(sealed_caps.get(shard, 0), r["concurrency_cap"])
    if sealed_star:
        # Shards named in the snapshot count with their cap then, others with today's.
        named = sum(sealed_caps.get(s, c) for s, c in caps.items())
        table.hidden_cap = max(max(sealed_star) - named, 0)
    table.queue_shards &= called
    table.work_conserving = _work_conserving(table, chosen)
    table.sealed_minutes = sum(
        1 for r in chosen if r["shard_id"] == WHOLE_RUN and not r.get("_live")
    )
    if not active:
        return table
    check_run_minutes(
        state.run_id, int(active[0].timestamp()) // 60, int(active[-1].timestamp()) // 60
    )
    minute = active[0]
    while minute <= active[-1]:
        table.minutes.append(minute)
        minute += MINUTE
    for r in chosen:  # as before: a later row of the same shard and minute wins
        table.stored.setdefault(r["shard_id"], {})[r["minute_utc"]] = r
    table.called = sorted(called)
    table.live_minutes = live_minutes
    table.now, table.close_after_s = now, close_after_s
    return table


def _apply_rules(
    table: CurrentTable,
    row: dict[str, Any],
    shard: str,
    is_sealed: bool,
    now: datetime,
    close_after_s: float,
) -> dict[str, Any]:
    calls = row["calls_in_minute"]
    if not table.retries_measured:
        row["retries"] = row["retry_rate"] = None
    else:
        row["retries"] = row["retries"] or 0
        row["retry_rate"] = clean(row["retries"] / calls) if calls else None
    has_queue = shard in table.queue_shards if shard != WHOLE_RUN else bool(table.queue_shards)
    if not has_queue:
        row["queue_depth_mean"] = row["queue_depth_max"] = None
    elif row["queue_depth_mean"] is None:
        row["queue_depth_mean"], row["queue_depth_max"] = 0.0, 0
    if shard == WHOLE_RUN:
        caps = sum(table.caps.values()) + table.hidden_cap
        row["concurrency_cap"] = caps if table.caps or table.hidden_cap else None
    else:
        row["concurrency_cap"] = table.caps.get(shard)
    row["state"] = _state_of(row["minute_utc"], is_sealed, now, close_after_s)
    for key in ("_live", "queue_reports", "retry_evidence", "queue_seconds", "sag_seconds"):
        row.pop(key, None)
    row.pop("sag_cap", None)
    row.pop("data_as_of", None)
    row.pop("computed_at", None)
    return row


def _work_conserving(table: CurrentTable, chosen: list[dict[str, Any]]) -> dict[str, Any]:
    """The check from the per-minute seconds: the live rows' before any seal; after one
    (snapshots keep no per-second counts) the run facts' copies, kept for every minute,
    when they cover every attempt. Null while a cap changed after seconds were counted."""
    result = work_conserving_result()
    usable = {s: c for s, c in table.caps.items() if s in table.queue_shards and c}
    if not usable:
        return result
    counts: list[tuple[str, int, int, int | None]]
    if table.state.snapshot_version is None:
        counts = [(r["shard_id"], r["queue_seconds"], r["sag_seconds"], r["sag_cap"])
                  for r in chosen]  # fmt: skip
    else:
        attempts = sum(r["calls_in_minute"] for r in chosen if r["shard_id"] == WHOLE_RUN)
        if sum(f["attempts"] for f in table.run_facts) != attempts:
            return result  # minutes the facts do not cover: waits for the next seal
        counts = [(shard, q, s, c) for f in table.run_facts
                  for shard, (q, s, c) in f["work_seconds"].items()]  # fmt: skip
    queued = sag = 0
    for shard, queue_seconds, sag_seconds, sag_cap in counts:
        cap = usable.get(shard)
        if cap is None:
            continue
        if queue_seconds and sag_cap != cap:
            return result  # counted against an older cap: not exact until resealed
        queued += queue_seconds
        sag += sag_seconds
    return clean(work_conserving_result(queued, sag))


def _peak(whole: list[dict[str, Any]], by: str) -> dict[str, Any] | None:
    active = [r for r in whole if r["calls_in_minute"] > 0 and r["state"] in SETTLED]
    if not active:
        return None
    row = min(active, key=lambda r: (-r[by], r["minute_utc"]))  # ties: earliest
    return {
        "minute_utc": minute_text(row["minute_utc"]),
        "shard_count": row["shards_active"],
        "calls_in_minute": row["calls_in_minute"],
        "completion_tpm_out": row["completion_tpm_out"],
        "prompt_tpm_in": row["prompt_tpm_in"],
        "tpm_total": row["tpm_total"],
    }


def live_figures(table: CurrentTable) -> dict[str, Any]:
    """The run object of a live run: what minute rows determine exactly, the rest null."""
    state = table.state
    whole = table.shard_rows(WHOLE_RUN)
    calls = sum(r["calls_in_minute"] for r in whole)
    successes = sum(r["successes"] for r in whole)
    prompt = sum(r["prompt_tpm_in"] for r in whole)
    completion = sum(r["completion_tpm_out"] for r in whole)
    # Open minutes are still filling: never a peak, never part of the sustained rate.
    inner = [r["tpm_total"] for r in whole[1:-1] if r["state"] in SETTLED]
    tokens = {s: table.shard_tokens(s) for s in table.shard_ids}
    total = sum(tokens.values())
    balance: dict[str, Any] = {"shares": None, "imbalance": None}
    if total:
        shares = {s: t / total for s, t in tokens.items()}
        balance = {"shares": shares, "imbalance": max(shares.values()) * len(shares)}
    retries = sum(r["retries"] or 0 for r in whole)
    figures: dict[str, Any] = {
        "run_id": state.run_id,
        "attempts": calls,
        "shard_count": len(table.shard_ids),
        "first_event_utc": ns_to_rfc3339(state.first_event_ns),
        "last_event_utc": ns_to_rfc3339(state.last_event_ns),
        "active_minutes": sum(1 for r in whole if r["calls_in_minute"] > 0),
        "peak_minute": _peak(whole, "tpm_total"),
        "peak_completion_minute": _peak(whole, "completion_tpm_out"),
        "sustained_tpm_total": float(statistics.median(inner)) if inner else None,
        "attempt_success_rate": successes / calls if calls else None,
        "retry_rate": retries / calls if calls and table.retries_measured else None,
        "shard_balance": balance,
        "declared_shard_count": state.declared_shard_count,
        "concurrency_cap": state.concurrency_cap,
        "sweep_id": state.sweep_id,
        "work_conserving": table.work_conserving,
        "tokens": {"prompt": prompt, "completion": completion, "total": prompt + completion},
        **_call_figures(table, calls),
        "open_minutes": [minute_text(r["minute_utc"]) for r in whole if r["state"] == "open"],
        "diagnostics": live_diagnostics(table),
        "events_sha256": None,
        "seal": None,
        "snapshot_version": None,
    }
    figures = clean(figures)
    return figures


def _call_figures(table: CurrentTable, attempts: int) -> dict[str, Any]:
    """Logical calls, call success rate and retry causes (exact), TTFT and latency
    (sketched percentiles, exact moments) merged from every minute's run facts
    (docs/metrics.md#live-approximations). Not measured (null) while the facts do not
    cover every attempt counted in the minute rows (minutes stored before the facts
    were kept, or sealed before the live table caught up)."""
    facts = table.run_facts
    covered = sum(f["attempts"] for f in facts) == attempts and attempts > 0
    if not covered:
        return {
            "logical_calls": None,
            "call_success_rate": None,
            "retry_causes": None,
            "ttft_s": value_sketch.figures(None, variance=True),
            "latency_s": value_sketch.figures(None, variance=False),
        }
    calls = sum(f["logical_calls"] for f in facts)
    ok_calls = sum(f["call_successes"] for f in facts)
    causes: dict[str, int] | None = None
    if any(f["explicit_calls"] for f in facts) and table.retries_measured:
        causes = {}
        for f in facts:
            for cause, count in f["retry_causes"].items():
                causes[cause] = causes.get(cause, 0) + count
        causes = dict(sorted(causes.items()))
    return {
        "logical_calls": calls,
        "call_success_rate": ok_calls / calls if calls else None,
        "retry_causes": causes,
        "ttft_s": value_sketch.figures(
            value_sketch.merged(f["ttft"] for f in facts), variance=True
        ),
        "latency_s": value_sketch.figures(
            value_sketch.merged(f["latency"] for f in facts), variance=False
        ),
    }


def live_diagnostics(table: CurrentTable) -> dict[str, Any]:
    """The diagnostics of a live run over its closed and sealed minutes (``"live": true``):
    the retry storm and the work-conserving check from its minute rows; the deadline
    overrun, tool-held slots and target saturation from per-minute sums in its run facts
    (analytics/live/minute_state.py), the same arithmetic as the sealed figures."""
    whole = [r for r in table.shard_rows(WHOLE_RUN) if r["state"] in SETTLED]
    storm = None
    if table.retries_measured and whole:
        storm = retry_storm_result(
            ((minute_text(r["minute_utc"]), r["calls_in_minute"], r["retries"]) for r in whole),
            DEFAULT_RETRY_BUDGET,
        )
    return {
        "live": True,
        "through_minute_utc": minute_text(whole[-1]["minute_utc"]) if whole else None,
        "retry_storm": storm,
        "deadline_overrun": _deadline_overrun(table, {r["minute_utc"] for r in whole}),
        "slot_held_by_tool": _slot_held_by_tool(table, {r["minute_utc"] for r in whole}),
        "target_saturation": _target_saturation(table, {r["minute_utc"] for r in whole}),
        "work_conserving": table.work_conserving,
    }


def _facts_cover(table: CurrentTable, column: str) -> bool:
    """Whether the run facts count every attempt of the minute rows and all carry
    ``column`` (rows written before it existed do not)."""
    facts = table.run_facts
    attempts = sum(r["calls_in_minute"] for r in table.shard_rows(WHOLE_RUN))
    return sum(f["attempts"] for f in facts) == attempts and all(
        f.get(column) is not None for f in facts
    )


def _slot_held_by_tool(table: CurrentTable, settled: set[datetime]) -> dict[str, Any] | None:
    """Tool-held slot time over the settled minutes (attempts ending in them), from the
    facts' sums; null when the run stored no tool span or the facts miss attempts."""
    if not _facts_cover(table, "tools"):
        return None
    facts = table.run_facts
    tool_spans = sum(f["tools"]["tool_spans"] for f in facts)
    if tool_spans == 0:
        return None
    mine = [f["tools"] for f in facts if f["minute_utc"] in settled]
    slot_seconds = float(sum(t["slot_ns"] for t in mine))
    held = float(sum(t["held_ns"] for t in mine))
    result: dict[str, Any] = clean(
        {
            "share": held / slot_seconds if slot_seconds else None,
            "tool_slot_seconds": held / 1e9,
            "slot_seconds": slot_seconds / 1e9,
            "tool_spans": tool_spans,
            "attempts_holding_for_tools": sum(t["holding"] for t in mine),
        }
    )
    return result


def _target_saturation(table: CurrentTable, settled: set[datetime]) -> list[dict[str, Any]] | None:
    """In-flight against each declared target cap over the settled minutes: the seconds
    from the least start to the largest end second of the target's attempts, the level
    histogram summed over minutes; null when no target declares a cap."""
    if not _facts_cover(table, "targets"):
        return None
    caps: dict[tuple[Any, Any], int] = {}
    for f in table.run_facts:
        for t in f["targets"]:
            if t["cap"] is not None:
                key = (t["provider"], t["model"])
                caps[key] = max(caps.get(key, 0), t["cap"])
    if not caps:
        return None
    out = []
    for (provider, model), cap in sorted(
        caps.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))
    ):
        lows: list[int] = []
        highs: list[int] = []
        levels: dict[int, int] = {}
        for f in table.run_facts:
            if f["minute_utc"] not in settled:
                continue
            for t in f["targets"]:
                if (t["provider"], t["model"]) != (provider, model):
                    continue
                # The bounds of its attempts ending here, and of the seconds in flight
                # here (an attempt ending in an open minute is not in the first).
                for low, high in ((t["first"], t["last"]), tuple(t["busy"] or (None, None))):
                    if low is not None:
                        lows.append(low)
                        highs.append(high)
                for level, seconds in t["levels"]:
                    levels[level] = levels.get(level, 0) + seconds
        seconds = max(highs) - min(lows) if lows else 0
        figures: dict[str, Any] = dict.fromkeys(
            ("seconds", "in_flight_mean", "in_flight_max", "share_at_cap", "share_over_cap")
        )
        if seconds > 0:
            figures = {
                "seconds": seconds,
                "in_flight_mean": float(sum(v * n for v, n in levels.items()) / seconds),
                "in_flight_max": max(levels, default=0),
                "share_at_cap": float(sum(n for v, n in levels.items() if v >= cap) / seconds),
                "share_over_cap": float(sum(n for v, n in levels.items() if v > cap) / seconds),
            }
        out.append(clean({"provider": provider, "model": model, "cap": cap, **figures}))
    return out


def _deadline_overrun(table: CurrentTable, settled: set[datetime]) -> dict[str, Any] | None:
    """The deadline overrun over the settled minutes, from their run facts' sums; null
    when nothing declares a deadline, the facts miss attempts, or a minute was checked
    against an older run-wide timeout (it is queued again and recomputed)."""
    facts = table.run_facts
    attempts = sum(r["calls_in_minute"] for r in table.shard_rows(WHOLE_RUN))
    if sum(f["attempts"] for f in facts) != attempts:
        return None
    limit = max((f["max_timeout_s"] for f in facts if f["max_timeout_s"] is not None),
                default=None)  # fmt: skip
    checked = over = 0
    wasted = 0.0
    for f in facts:
        fold = f["deadline"]
        if fold["without_own"] and fold["limit"] != limit:
            return None
        if f["minute_utc"] in settled:
            checked, over = checked + fold["attempts"], over + fold["over"]
            wasted += fold["wasted_s"]
    if checked == 0:
        return None
    result: dict[str, Any] = clean(
        {
            "share": over / checked,
            "slot_seconds_wasted": wasted,
            "attempts_with_deadline": checked,
            "attempts_over_deadline": over,
        }
    )
    return result


def run_view(
    session: Session, run_id: str, *, close_after_s: float = 120.0
) -> dict[str, Any] | None:
    """``GET /v1/runs/{run_id}``: sealed figures, or live ones with ``live: true``."""
    state = run_state(session, run_id)
    if state is None:
        return None
    if not state.has_new_data and state.snapshot_metrics is not None:
        data_as_of = state.snapshot_data_as_of
        return {
            **state.snapshot_metrics,
            "live": state.is_live,  # a provisional snapshot covering every span so far
            "data_as_of": utc_ms_or_none(data_as_of),
            "snapshot_final": state.snapshot_final,
        }
    table = current_table(session, run_id, close_after_s=close_after_s)
    assert table is not None
    return {
        **live_figures(table),
        "live": True,
        "data_as_of": utc_ms_or_none(table.data_as_of),
        "latest_sealed_version": state.snapshot_version,
    }


def _filled(template: dict[str, Any], minute: datetime) -> dict[str, Any]:
    """The stored-row form of an empty minute of ``template``'s shard: counts and samples
    0, nothing measured, and the run's rules as the shard's stored rows show them (its
    cap, queue depth 0 or null, retries 0 or null)."""
    row: dict[str, Any] = dict.fromkeys(MINUTE_ROW_COLUMNS)
    row |= {k: v for k, v in EMPTY_FIGURES.items() if k in row}
    row |= {"shard_id": template["shard_id"], "minute_utc": minute}
    row["concurrency_cap"] = template["concurrency_cap"]
    if template["retries"] is None:
        row["retries"] = None
    if template["queue_depth_mean"] is None:
        row["queue_depth_mean"] = row["queue_depth_max"] = None
    return row


def _sealed_minutes(
    session: Session, state: RunState, shard_id: str, window: MinuteWindow
) -> list[dict[str, Any]]:
    """One shard's (or ``*``'s) rows of the newest snapshot over the window's minutes:
    the stored rows of those minutes, and a shard's empty minutes made on the way."""
    version = state.snapshot_version
    assert version is not None
    span = sealed_minute_span(session, state.run_id, version)
    template = (
        sealed_shard_row(session, state.run_id, version, shard_id)
        if shard_id != WHOLE_RUN
        else None
    )
    if shard_id != WHOLE_RUN and template is None:
        raise UnknownShard(shard_id)
    minutes = window.minutes(*span) if span is not None else []
    if not minutes:
        return []
    stored = sealed_minute_rows(session, state.run_id, version, shard_id, minutes[0], minutes[-1])
    if template is None:
        rows = stored
    else:
        by_minute = {row["minute_utc"]: row for row in stored}
        rows = [by_minute.get(m) or _filled(template, m) for m in minutes]
    return [{**row, "state": "sealed"} for row in rows]


def minutes_view(
    session: Session,
    run_id: str,
    shard_id: str = WHOLE_RUN,
    *,
    close_after_s: float = 120.0,
    window: MinuteWindow | None = None,
) -> list[dict[str, Any]] | None:
    """``GET /v1/runs/{run_id}/minutes``: rows of one shard (or ``*``) with ``state``, over
    the ``window``'s minutes (the whole run by default). None for an unknown run;
    :class:`UnknownShard` for a shard without rows.

    A run sealed with nothing newer reads that shard's sealed rows of those minutes only
    (the seal applied the table's rules already) and makes its empty minutes: the work
    follows the rows asked for, not every shard's.
    """
    state = run_state(session, run_id)
    if state is None:
        return None
    window = window or MinuteWindow()
    if not state.has_new_data and state.snapshot_version is not None:
        return _sealed_minutes(session, state, shard_id, window)
    table = current_table(session, run_id, close_after_s=close_after_s)
    if table is None:
        return None
    if shard_id != WHOLE_RUN and table.minutes and shard_id not in table.called:
        raise UnknownShard(shard_id)
    return table.shard_rows(shard_id, window)
