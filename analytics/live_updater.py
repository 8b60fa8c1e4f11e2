"""Keeps the live minute table current: drains ingest's marks, recomputes touched minutes.

One update of one run is one REPEATABLE READ transaction (:mod:`storage.live_store`):
take the run's marks, read the attempts of each contiguous range of touched minutes plus
those overlapping it, and replace those minutes' live rows. The cost follows the touched
minutes, never the run's size (docs/metrics.md#live-figures).

Two flags of an attempt depend on other attempts of the run: ``rollup`` (a stored span
names it as parent) and ``later_in_call`` (an earlier attempt of its explicit call exists,
for attempts without a resend count). They are probed in the database once per attempt
and kept in a per-run cache of the attempts last read, so a busy minute re-read every
update probes only its new attempts. New attempts can change the flags of others (a late
child turns its parent into a rollup; an earlier attempt moves its call's others): those
attempts are looked up from the new ones, dropped from the cache, and their minutes
recomputed in the same update.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import polars as pl
import psycopg

from analytics.live_minutes import live_minute_rows
from storage.live_store import (
    MINUTE_NS,
    LiveRunFacts,
    dependents,
    dirty_run_ids,
    fetch_window,
    known_caps,
    live_run_facts,
    live_transaction,
    mark_stale_caps,
    probe_flags,
    replace_minutes,
    take_marks,
)

log = logging.getLogger("tpmledger.analytics.live")

SECOND_NS = 1_000_000_000
# Touched minutes further apart than this are read as separate windows.
WINDOW_GAP_MINUTES = 10


@dataclass
class LiveUpdate:
    """What one run's update did (the benchmark prints it)."""

    run_id: str
    minutes: int = 0
    attempts_read: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0


def minute_span(from_ns: int, to_ns: int) -> range:
    """Minute starts (ns) from the minute of ``from_ns`` to the minute of ``to_ns``."""
    first = from_ns - from_ns % MINUTE_NS
    last = to_ns - to_ns % MINUTE_NS
    return range(first, last + MINUTE_NS, MINUTE_NS)


def contiguous_ranges(minutes: Iterable[int]) -> list[list[int]]:
    """Sorted minutes split where the gap exceeds :data:`WINDOW_GAP_MINUTES`."""
    ranges: list[list[int]] = []
    for minute in sorted(set(minutes)):
        if ranges and minute - ranges[-1][-1] <= WINDOW_GAP_MINUTES * MINUTE_NS:
            ranges[-1].append(minute)
        else:
            ranges.append([minute])
    return ranges


def _caps_of(rows: pl.DataFrame, known: dict[str, int]) -> dict[str, int]:
    """The run's cap per shard: the caps known before and those the rows declare."""
    caps = dict(known)
    declared = rows.filter(pl.col("shard_id") != "*", pl.col("concurrency_cap").is_not_null())
    for shard, cap in declared.group_by("shard_id").agg(pl.col("concurrency_cap").max()).rows():
        caps[shard] = max(caps.get(shard, 0), int(cap))
    return caps


def _minute_utc(ns: int) -> datetime:
    return datetime.fromtimestamp(ns // SECOND_NS, tz=UTC)


_FLAG_SCHEMA = {
    "trace_id": pl.String,
    "span_id": pl.String,
    "rollup": pl.Int64,
    "later_in_call": pl.Int64,
}


@dataclass
class LiveUpdater:
    """Drains the marks of every run; :meth:`update_once` is the unit tests drive."""

    url: str
    failures: dict[str, float] = field(default_factory=dict)  # run_id -> retry after
    # run_id -> flags of the attempts read by the run's last update (see module doc)
    flags: dict[str, pl.DataFrame] = field(default_factory=dict)

    def update_once(self) -> list[LiveUpdate]:
        updates = []
        for run_id in dirty_run_ids(self.url):
            if self.failures.get(run_id, 0.0) > time.monotonic():
                continue
            try:
                update = self.update_run(run_id)
            except Exception:  # one bad run must not stop the others
                log.exception("live update of %s failed; retrying in 30 s", run_id)
                self.failures[run_id] = time.monotonic() + 30.0
                self.flags.pop(run_id, None)
                continue
            self.failures.pop(run_id, None)
            if update is not None:
                updates.append(update)
        return updates

    def update_run(self, run_id: str) -> LiveUpdate | None:
        """Recompute the minutes the run's queued marks touched (one transaction)."""
        started, cpu = time.perf_counter(), time.process_time()
        with live_transaction(self.url) as conn:
            marks = take_marks(conn, run_id)
            facts = live_run_facts(conn, run_id)
            if not marks or facts is None:
                return None
            touched: set[int] = set()
            for end_minute, from_minute in marks:
                touched.update(minute_span(from_minute, end_minute))
            cache = self.flags.get(run_id, pl.DataFrame(schema=_FLAG_SCHEMA))
            windows = {tuple(m): self._window(conn, facts, m) for m in contiguous_ranges(touched)}
            # What the attempts read for the first time change elsewhere.
            unseen = [_unseen(w, cache) for w in windows.values()]
            fresh = pl.concat(unseen) if unseen else pl.DataFrame(schema=_FLAG_SCHEMA)
            changed = dependents(
                conn, run_id, fresh["trace_id"].to_list(), fresh["span_id"].to_list()
            )
            for dependent in changed:
                touched.update(minute_span(dependent.began_ns, dependent.end_ns))
            if changed:
                stale = pl.DataFrame(
                    {
                        "trace_id": [d.trace_id for d in changed],
                        "span_id": [d.span_id for d in changed],
                    }
                )
                cache = cache.join(stale, on=["trace_id", "span_id"], how="anti")
            update = LiveUpdate(run_id, minutes=len(touched))
            caps = known_caps(conn, run_id)
            frames, seen = [], []
            for minutes in contiguous_ranges(touched):
                window = windows.get(tuple(minutes))
                if window is None:
                    window = self._window(conn, facts, minutes)
                window, flags = self._with_flags(conn, run_id, window, cache)
                seen.append(flags)
                update.attempts_read += window.height
                frames.append(live_minute_rows(window, minutes, caps))
            self.flags[run_id] = pl.concat(seen).unique(["trace_id", "span_id"])
            rows = pl.concat(frames) if frames else None
            computed_at = datetime.now(UTC)
            records = []
            if rows is not None:
                for row in rows.to_dicts():
                    row["minute_utc"] = _minute_utc(row.pop("minute_ns"))
                    row.update(run_id=run_id, data_as_of=facts.updated_at, computed_at=computed_at)
                    records.append(row)
            replace_minutes(conn, run_id, [_minute_utc(m) for m in sorted(touched)], records)
            if rows is not None:
                # A larger cap declared now: minutes counted against the old one go again.
                mark_stale_caps(conn, run_id, _caps_of(rows, caps))
        update.cpu_s = time.process_time() - cpu
        update.wall_s = time.perf_counter() - started
        return update

    @staticmethod
    def _with_flags(
        conn: psycopg.Connection, run_id: str, window: pl.DataFrame, cache: pl.DataFrame
    ) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The window with ``rollup`` and ``later_in_call``: cached, else probed."""
        joined = window.join(cache, on=["trace_id", "span_id"], how="left")
        missing = joined.filter(pl.col("rollup").is_null())
        if missing.height:
            probed = probe_flags(
                conn, run_id, missing["trace_id"].to_list(), missing["span_id"].to_list()
            )
            joined = joined.update(probed, on=["trace_id", "span_id"], how="left")
        flags = joined.select(list(_FLAG_SCHEMA))
        return joined, flags

    @staticmethod
    def _window(conn: psycopg.Connection, facts: LiveRunFacts, minutes: list[int]) -> pl.DataFrame:
        low = minutes[0]
        # Every attempt overlapping the range ends before its end + the longest interval.
        high = minutes[-1] + MINUTE_NS + facts.max_slot_ns + SECOND_NS
        return fetch_window(conn, facts.run_id, low, high)


def _unseen(window: pl.DataFrame, cache: pl.DataFrame) -> pl.DataFrame:
    """Ids of the window's attempts the cache does not hold (read for the first time)."""
    return window.select("trace_id", "span_id").join(
        cache.select("trace_id", "span_id"), on=["trace_id", "span_id"], how="anti"
    )
