"""Keeps the live minute table current: drains ingest's marks, recomputes touched minutes.

One update of one run is one REPEATABLE READ transaction (:mod:`storage.live_store`):
take the run's marks, read the attempts of each contiguous range of touched minutes plus
those overlapping it, and replace those minutes' live rows. The cost follows the touched
minutes, never the run's size (docs/metrics.md#live-figures).

Two flags of an attempt depend on other attempts of the run: ``rollup`` (a stored span
names it as parent) and ``later_in_call`` (an earlier attempt of its explicit call exists,
for attempts without a resend count). They are probed in the database once per attempt
and kept with the attempts in a per-run cache of the range last read. Every ingest commit
records a batch id with its rows and its marks, so the next update of that range reads
only the rows of the commits its marks name (a busy minute is not re-read whole on every
update) and probes only those. New attempts can change the flags of others (a late child
turns its parent into a rollup; an earlier attempt moves its call's others): those
attempts are looked up from the new ones, their flags forgotten, and their minutes
recomputed in the same update. The cache is dropped when another worker drained the
run's marks in between (``live_state.generation``) or an update failed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import polars as pl
import psycopg

from tpmledger.analytics.live.live_minutes import live_minute_rows, run_minute_facts
from tpmledger.analytics.live.minute_extras import minute_extras
from tpmledger.storage.database import in_one_snapshot
from tpmledger.storage.live_store import (
    MINUTE_NS,
    LiveRunFacts,
    Mark,
    dirty_run_ids,
    known_caps,
    known_max_timeout,
    live_run_facts,
    live_transaction,
    mark_stale_caps,
    mark_stale_timeouts,
    replace_minutes,
    replace_run_minutes,
    summarize_new_batches,
    take_marks,
)
from tpmledger.storage.live_window import dependents, fetch_window, probe_flags
from tpmledger.storage.minute_extras_store import replace_extras
from tpmledger.storage.minute_keys import WHOLE_RUN

log = logging.getLogger("tpmledger.analytics.live")

SECOND_NS = 1_000_000_000
# A live update aborted by a concurrent transaction is tried again at once, this often.
SERIALIZATION_TRIES = 5
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
    declared = rows.filter(pl.col("shard_id") != WHOLE_RUN, pl.col("concurrency_cap").is_not_null())
    for shard, cap in declared.group_by("shard_id").agg(pl.col("concurrency_cap").max()).rows():
        caps[shard] = max(caps.get(shard, 0), int(cap))
    return caps


# Ingest refuses spans (and queue waits) longer than a day (docs/ingest.md#limits); an
# interval stored before that limit existed is followed back two days at most, so one
# span can never make an update walk millions of minutes.
MAX_INTERVAL_NS = 2 * 86_400 * SECOND_NS


def _clipped(mark: Mark) -> int:
    if mark.end_minute_ns - mark.from_minute_ns > MAX_INTERVAL_NS:
        log.warning("an interval longer than two days is followed back two days only")
        return mark.end_minute_ns - MAX_INTERVAL_NS
    return mark.from_minute_ns


def _minute_utc(ns: int) -> datetime:
    return datetime.fromtimestamp(ns // SECOND_NS, tz=UTC)


_KEYS = ["trace_id", "span_id"]
_FLAGS = ["rollup", "later_in_call", "has_later"]


@dataclass
class RunCache:
    """The attempts ending in [low, high) as of the run's last update, with their flags.

    Valid while this updater made every update of the run (``generation``); the next
    update then reads only the rows of the ingest commits its marks name.
    """

    generation: int
    low: int
    high: int
    rows: pl.DataFrame


@dataclass
class LiveUpdater:
    """Drains the marks of every run; :meth:`update_once` is the unit tests drive."""

    url: str
    failures: dict[str, float] = field(default_factory=dict)  # run_id -> retry after
    caches: dict[str, RunCache] = field(default_factory=dict)

    def update_once(self) -> list[LiveUpdate]:
        updates = []
        run_ids = in_one_snapshot(self.url, dirty_run_ids)
        if run_ids:
            summarize_new_batches(self.url)
        for run_id in run_ids:
            if self.failures.get(run_id, 0.0) > time.monotonic():
                continue
            try:
                update = self._update_retrying(run_id)
            except Exception:  # one bad run must not stop the others
                log.exception("live update of %s failed; retrying in 30 s", run_id)
                self.failures[run_id] = time.monotonic() + 30.0
                self.caches.pop(run_id, None)
                continue
            self.failures.pop(run_id, None)
            if update is not None:
                updates.append(update)
        return updates

    def _update_retrying(self, run_id: str) -> LiveUpdate | None:
        """:meth:`update_run`, tried again at once when PostgreSQL aborted its transaction
        for a concurrent one (a seal or checkpoint dropping the same live rows, another
        worker): nothing was written, and the next try reads a fresh snapshot."""
        for attempt in range(1, SERIALIZATION_TRIES + 1):
            try:
                return self.update_run(run_id)
            except (
                psycopg.errors.SerializationFailure,
                psycopg.errors.DeadlockDetected,
                psycopg.errors.UniqueViolation,  # a replica inserted the same minute's rows
            ):
                self.caches.pop(run_id, None)
                if attempt == SERIALIZATION_TRIES:
                    raise
                log.info("live update of %s met a concurrent transaction; tried again", run_id)
        return None  # unreachable

    def update_run(self, run_id: str) -> LiveUpdate | None:
        """Recompute the minutes the run's queued marks touched (one transaction)."""
        started, cpu = time.perf_counter(), time.process_time()
        cache = self.caches.pop(run_id, None)
        with live_transaction(self.url) as conn:
            marks, generation = take_marks(conn, run_id)
            facts = live_run_facts(conn, run_id)
            if not marks or facts is None:
                return None
            if cache is not None and cache.generation != generation - 1:
                cache = None  # another worker drained marks meanwhile
            batches = sorted({m.batch_id for m in marks if m.batch_id is not None})
            reader = _WindowReader(
                conn, facts, cache, None if any(m.batch_id is None for m in marks) else batches
            )
            touched: set[int] = set()
            for mark in marks:
                touched.update(minute_span(_clipped(mark), mark.end_minute_ns))
            windows = {tuple(m): reader.read(m) for m in contiguous_ranges(touched)}
            # What attempts seen for the first time change elsewhere (their flags unknown).
            fresh = pl.concat([w.filter(pl.col("rollup").is_null()).select(_KEYS)
                               for w in windows.values()])  # fmt: skip
            # A cold read (no cache) of one busy range probes by range, in one pass.
            cold = cache is None and len(windows) == 1
            single = [reader.bounds(list(m)) for m in windows] if cold else [None]
            changed = dependents(
                conn, run_id, fresh["trace_id"].to_list(), fresh["span_id"].to_list(), single[0]
            )
            for dependent in changed:
                began = max(dependent.began_ns, dependent.end_ns - MAX_INTERVAL_NS)
                touched.update(minute_span(began, dependent.end_ns))
            stale = pl.DataFrame(
                {
                    "trace_id": [d.trace_id for d in changed],
                    "span_id": [d.span_id for d in changed],
                },
                schema={"trace_id": pl.String, "span_id": pl.String},
            ).unique()  # an attempt can be changed by several new ones
            reader.forget(stale)
            update = LiveUpdate(run_id, minutes=len(touched))
            caps = known_caps(conn, run_id)
            frames: list[pl.DataFrame] = []
            read: list[tuple[pl.DataFrame, list[int]]] = []
            extras: list[tuple[int, str, str, int]] = []
            del fresh
            for minutes in contiguous_ranges(touched):
                window = windows.pop(tuple(minutes), None)  # one copy of a window at a time
                window = reader.read(minutes) if window is None else _forget(window, stale)
                bounds = reader.bounds(minutes) if reader.cache is None else None
                window = _probe_missing(conn, run_id, window, bounds)
                update.attempts_read += window.height
                read.append((window, minutes))
            # Every range is read: the previous cache's rows (a busy minute's attempts) go
            # before the figures' working copies are made, so at most one of each is held.
            windows.clear()
            reader.cache = cache = None
            for window, minutes in read:
                frames.append(live_minute_rows(window, minutes, caps))
                extras += minute_extras(window, minutes)
                low, high = reader.bounds(minutes)
                cache = RunCache(generation, low, high, window)  # the latest range is kept
            rows = pl.concat(frames) if frames else None
            # The run's largest request timeout: deadline of attempts declaring none.
            known_timeout = known_max_timeout(conn, run_id)
            run_timeout = max(
                [t for t in [known_timeout, *(_max_timeout(w) for w, _ in read)] if t is not None],
                default=None,
            )
            facts_rows = [f for w, m in read for f in run_minute_facts(w, m, run_timeout)]
            _add_work_seconds(facts_rows, rows)
            computed_at = datetime.now(UTC)
            records = []
            if rows is not None:
                for row in rows.to_dicts():
                    row["minute_utc"] = _minute_utc(row.pop("minute_ns"))
                    row.update(run_id=run_id, data_as_of=facts.updated_at, computed_at=computed_at)
                    records.append(row)
            replace_minutes(conn, run_id, [_minute_utc(m) for m in sorted(touched)], records)
            for fact in facts_rows:
                fact["minute_utc"] = _minute_utc(fact.pop("minute_ns"))
                fact.update(run_id=run_id, data_as_of=facts.updated_at)
            replace_run_minutes(conn, run_id, [_minute_utc(m) for m in sorted(touched)], facts_rows)
            if run_timeout is not None and run_timeout != known_timeout:
                # A larger timeout declared now: minutes that used the old one go again.
                mark_stale_timeouts(conn, run_id, run_timeout)
            replace_extras(
                conn,
                run_id,
                [_minute_utc(m) for m in sorted(touched)],
                [(_minute_utc(m), kind, key, value) for m, kind, key, value in extras],
            )
            if rows is not None:
                # A larger cap declared now: minutes counted against the old one go again.
                mark_stale_caps(conn, run_id, _caps_of(rows, caps))
        if cache is not None:
            self.caches[run_id] = cache  # only once the transaction committed
        update.cpu_s = time.process_time() - cpu
        update.wall_s = time.perf_counter() - started
        return update


def _max_timeout(window: pl.DataFrame) -> float | None:
    """The largest valid request timeout the window's attempts (rollups too) declare."""
    value = pl.col("timeout_text").str.strip_chars().cast(pl.Float64, strict=False)
    found = window.select(pl.when(value.is_finite() & (value > 0)).then(value).max()).item()
    return None if found is None else float(found)


def _add_work_seconds(facts_rows: list[dict[str, Any]], rows: pl.DataFrame | None) -> None:
    """Each minute's work-conserving counts per shard, from its live rows, into its facts
    (they outlive the live rows a seal drops: the check stays live after a checkpoint)."""
    work: dict[int, dict[str, list[Any]]] = {}
    if rows is not None:
        shards = rows.filter(pl.col("shard_id") != WHOLE_RUN, pl.col("queue_seconds") > 0)
        for minute, shard, queued, sag, cap in shards.select(
            "minute_ns", "shard_id", "queue_seconds", "sag_seconds", "sag_cap"
        ).iter_rows():
            work.setdefault(minute, {})[shard] = [queued, sag, cap]
    for fact in facts_rows:
        fact["work_seconds"] = work.get(fact["minute_ns"], {})


class _WindowReader:
    """Reads the attempts of a range of minutes (and those overlapping it), from the cache
    where it holds them plus the rows of the new ingest commits, else from the table."""

    def __init__(
        self,
        conn: psycopg.Connection,
        facts: LiveRunFacts,
        cache: RunCache | None,
        batches: list[int] | None,
    ) -> None:
        self.conn, self.facts, self.cache, self.batches = conn, facts, cache, batches

    def bounds(self, minutes: list[int]) -> tuple[int, int]:
        # Every attempt overlapping the range ends before its end + the longest interval.
        return minutes[0], minutes[-1] + MINUTE_NS + self.facts.max_slot_ns + SECOND_NS

    def _fetch(self, low: int, high: int, batches: list[int] | None = None) -> pl.DataFrame:
        return fetch_window(self.conn, self.facts.run_id, low, high, batches)

    def read(self, minutes: list[int]) -> pl.DataFrame:
        low, high = self.bounds(minutes)
        cache, parts = self.cache, []
        a, b = (max(low, cache.low), min(high, cache.high)) if cache else (high, high)
        incremental = cache is not None and a < b and self.batches is not None
        if cache is not None and incremental:
            ends = pl.col("end_ns")
            parts.append(cache.rows.filter((ends >= a) & (ends < b)))
            parts.append(_unflagged(self._fetch(a, b, self.batches)))
            if low < a:
                parts.append(_unflagged(self._fetch(low, a)))
            if b < high:
                parts.append(_unflagged(self._fetch(b, high)))
        else:
            parts.append(_unflagged(self._fetch(low, high)))
        # The parts are disjoint: cached rows predate the new commits' rows, and the rest
        # lies outside the cached range.
        window = pl.concat(parts, how="diagonal_relaxed")
        if cache is not None and not incremental:  # flags of rows the cache knows
            known = cache.rows.select(*_KEYS, *(pl.col(f).alias(f"_{f}") for f in _FLAGS))
            window = (
                window.join(known, on=_KEYS, how="left")
                .with_columns(pl.coalesce(f, f"_{f}").alias(f) for f in _FLAGS)
                .drop(f"_{f}" for f in _FLAGS)
            )
        return window

    def forget(self, stale: pl.DataFrame) -> None:
        """Drop cached flags of attempts whose flags new attempts changed."""
        if self.cache is not None and stale.height:
            self.cache.rows = _forget(self.cache.rows, stale)


def _unflagged(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.with_columns(pl.lit(None, dtype=pl.Int64).alias(f) for f in _FLAGS)


def _forget(frame: pl.DataFrame, stale: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with the flags of ``stale`` attempts unknown again (probed anew)."""
    if stale.height == 0:
        return frame
    marked = frame.join(stale.unique().with_columns(_stale=pl.lit(True)), on=_KEYS, how="left")
    stale_row = pl.col("_stale").fill_null(False)
    return marked.with_columns(
        pl.when(stale_row).then(None).otherwise(pl.col(f)).alias(f) for f in _FLAGS
    ).drop("_stale")


def _probe_missing(
    conn: psycopg.Connection,
    run_id: str,
    window: pl.DataFrame,
    end_range: tuple[int, int] | None,
) -> pl.DataFrame:
    """The window with every unknown flag probed in the database."""
    missing = window.with_row_index("_row").filter(pl.col("rollup").is_null())
    if missing.height == 0:
        return window
    probed = probe_flags(
        conn, run_id, missing["trace_id"].to_list(), missing["span_id"].to_list(), end_range
    )
    # Probed by range, known flags come back too: only the missing ones are taken.
    probed = probed.join(missing.select(_KEYS), on=_KEYS, how="semi")
    return _settle_flags(window, missing, probed)


def _settle_flags(
    window: pl.DataFrame, missing: pl.DataFrame, probed: pl.DataFrame
) -> pl.DataFrame:
    """``window.update(probed, on=_KEYS, how="left")`` (keys are the attempts' primary
    key, so each names one row), writing only the flag columns of the ``missing`` rows
    (``_row``: their index in ``window``). An update joins and copies every column of the
    window: ~170 MiB for a busy minute's 900,000 attempts, to settle a few thousand."""
    found = probed.select(*_KEYS, *(pl.col(f).alias(f"_new_{f}") for f in _FLAGS))
    settled = missing.select("_row", *_KEYS, *_FLAGS).join(
        found, on=_KEYS, how="left", maintain_order="left"
    )
    rows = settled.get_column("_row")
    columns = []
    for flag in _FLAGS:
        dtype = window.schema[flag]
        values = settled.select(pl.coalesce(pl.col(f"_new_{flag}").cast(dtype), flag)).to_series()
        columns.append(window.get_column(flag).clone().scatter(rows, values))
    return window.with_columns(columns)
