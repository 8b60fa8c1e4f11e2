"""A run's current minute table: sealed where nothing changed, live where new data arrived.

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

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from tpmledger.analytics.kernels.figure_rules import clean, work_conserving_result
from tpmledger.analytics.kernels.run_level import ratio
from tpmledger.analytics.kernels.run_span_limit import check_run_minutes
from tpmledger.storage.readers.live_read import (
    RunState,
    live_minute_rows,
    live_run_minute_rows,
    run_state,
    sealed_minute_rows,
)
from tpmledger.storage.schema.minute_columns import EMPTY_FIGURES
from tpmledger.storage.schema.minute_keys import WHOLE_RUN

if TYPE_CHECKING:
    from tpmledger.analytics.views.minute_window import MinuteWindow


MINUTE = timedelta(minutes=1)
#: States whose minutes no longer change (except through late data): peak minutes and
#: sustained TPM of a live run are taken from these only (docs/metrics.md#open-minutes).
SETTLED = ("closed", "sealed")


def _empty_row(shard_id: str, minute: datetime) -> dict[str, Any]:
    """What a minute without a stored row shows, as the column declaration says."""
    return {"shard_id": shard_id, "minute_utc": minute, **EMPTY_FIGURES}


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
    # Per-minute run facts (storage.readers.live_read.live_run_minute_rows), every minute's.
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
        row["retry_rate"] = clean(ratio(row["retries"], calls))
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
