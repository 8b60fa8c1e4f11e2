"""Keeps the live minute table current: drains ingest's marks, recomputes touched minutes.

One update of one run is one REPEATABLE READ transaction (:mod:`storage.writers.live_store`):
take the run's marks, bring the state of each touched minute up to date, and replace
those minutes' live rows, run facts and extras with what the state gives. The cost
follows the touched minutes and the new rows, never the run's size
(docs/metrics.md#live-figures).

Each minute's state (:mod:`analytics.live.minute_state`) is mergeable: counts, sums,
sorted TTFT and latency values, per-second in-flight and queue depth. The states of the
newest minutes are kept between updates. Every ingest commit records a batch id with its
rows and its marks, so an update reads only the rows of the commits its marks name and
folds them into the kept states; a busy minute's attempts are neither re-read nor held.
A minute without a kept state (the first update, a late attempt into an older minute, a
worker restart, another worker draining the run's marks in between: ``live_state.
generation``, or a failed update) is read whole from the table, a page at a time.

Three flags of an attempt depend on other attempts of the run: ``rollup`` (a stored span
names it as parent), ``later_in_call`` (an earlier attempt of its explicit call exists,
for attempts without a resend count) and ``has_later`` (a later one exists). They are
probed in the database for the rows folded. New attempts can change the flags of others
(a late child turns its parent into a rollup; an earlier attempt moves its call's
others): those attempts are looked up from the new ones, taken out of the kept states
with the flags the previous update saw (probed without the new commits' rows) and put
back with today's; minutes without a kept state are read whole. Marks that name no
commit (minutes queued again for a larger cap or timeout) have their minutes read whole.

Tool spans (docs/metrics.md#diagnostics) mark their minutes with their commit too. Each
attempt folded carries ``tool_held_ns``, its slot time held by tool spans of its trace,
from the tool spans stored now; attempts already folded that a new tool span overlaps
are taken out with the time held before these commits and put back with today's.
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

from tpmledger.analytics.live.attempt_reader import KEYS, AttemptReader
from tpmledger.analytics.live.minute_state import MinuteState, fold_ending, fold_overlap
from tpmledger.analytics.live.minute_state_figures import (
    minute_extras,
    minute_facts,
    minute_rows,
)
from tpmledger.durations import MINUTE_NS, SECOND_NS
from tpmledger.storage.readers.attempt_flags import Dependent, dependents_in_range
from tpmledger.storage.schema.minute_keys import WHOLE_RUN
from tpmledger.storage.server.backend_cpu import backend_cpu_s
from tpmledger.storage.server.database import in_one_snapshot
from tpmledger.storage.writers.live_store import (
    LiveRunFacts,
    Mark,
    connect_live,
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
from tpmledger.storage.writers.minute_extras_store import replace_extras
from tpmledger.storage.writers.tool_span_store import (
    fetch_new_tools,
    tool_dependents,
)

log = logging.getLogger("tpmledger.analytics.live")


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
    # CPU seconds its PostgreSQL backend used meanwhile, when the server runs on this
    # machine (:func:`backend_cpu_s`); else 0.
    backend_cpu_s: float = 0.0
    wall_s: float = 0.0
    # Wall seconds per stage (new rows, dependents, fold, build, emit, write): a slow
    # update's log line says where the time went.
    stages: dict[str, float] = field(default_factory=dict)

    def stage(self, name: str, since: float) -> float:
        now = time.perf_counter()
        self.stages[name] = self.stages.get(name, 0.0) + now - since
        return now


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


# States kept after an update: the newest minute's and this many minutes before it,
# always; older ones (a backfill, a replay, late retries touch many minutes per commit)
# while they hold at most KEPT_BYTES of per-attempt values together, newest minutes first
# (at 15,000 spans/s one minute alone holds ~14 MiB: a busy run keeps only the two kept
# always, as before, and the worker's memory budget holds; an hour's backfill of 300,000
# spans fits). A minute without a kept state is read whole from the table when touched.
KEPT_MINUTES = 1
KEPT_BYTES = 8 * 2**20


@dataclass
class RunStates:
    """The state of each minute of the range the run's last update touched.

    Valid while this updater made every update of the run (``generation``): the next
    update then folds only the rows of the ingest commits its marks name into them.
    """

    generation: int
    minutes: dict[int, MinuteState]
    #: A minute from here on without a state held no attempt before the next update's
    #: commits: the updates since the run's first kept a state for every minute they
    #: touched, and let go only of minutes before this one. None: not known (this
    #: updater's first update of the run came after others).
    empty_from_ns: int | None = None


@dataclass
class LiveUpdater:
    """Drains the marks of every run; :meth:`update_once` is the unit tests drive."""

    url: str
    failures: dict[str, float] = field(default_factory=dict)  # run_id -> retry after
    states: dict[str, RunStates] = field(default_factory=dict)
    # Its own connection, kept between updates and opened again after a failure.
    _conn: psycopg.Connection | None = field(default=None, repr=False)

    def connection(self) -> psycopg.Connection:
        """The updater's connection (:func:`storage.writers.live_store.connect_live`)."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = connect_live(self.url)
        return self._conn

    def close(self) -> None:
        """Close the updater's connection (the next update opens one again)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def update_once(self) -> list[LiveUpdate]:
        updates = []
        run_ids = in_one_snapshot(self.url, dirty_run_ids)
        if run_ids:
            try:
                summarize_new_batches(self.connection())
            except psycopg.OperationalError:
                self.close()  # the database went away: the next update connects again
                raise
        for run_id in run_ids:
            if self.failures.get(run_id, 0.0) > time.monotonic():
                continue
            try:
                update = self._update_retrying(run_id)
            except Exception:  # one bad run must not stop the others
                log.exception("live update of %s failed; retrying in 30 s", run_id)
                self.failures[run_id] = time.monotonic() + 30.0
                self.states.pop(run_id, None)
                if self._conn is not None and (self._conn.broken or self._conn.closed):
                    self.close()
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
                self.states.pop(run_id, None)
                if attempt == SERIALIZATION_TRIES:
                    raise
                log.info("live update of %s met a concurrent transaction; tried again", run_id)
        return None  # unreachable

    def update_run(self, run_id: str) -> LiveUpdate | None:
        """Recompute the minutes the run's queued marks touched (one transaction)."""
        started, cpu = time.perf_counter(), time.process_time()
        backend = backend_cpu_s(self.connection())
        held = self.states.pop(run_id, None)
        with live_transaction(self.connection()) as conn:
            marks, generation = take_marks(conn, run_id)
            facts = live_run_facts(conn, run_id)
            if not marks or facts is None:
                return None
            if held is not None and held.generation != generation - 1:
                held = None  # another worker drained marks meanwhile: rebuilt from the table
            states = held.minutes if held is not None else {}
            empty_from = held.empty_from_ns if held is not None else None
            touched: set[int] = set()
            rebuild: set[int] = set()  # minutes read whole from the table
            for mark in marks:
                span = minute_span(_clipped(mark), mark.end_minute_ns)
                touched.update(span)
                if mark.batch_id is None:  # queued again (or before batches were kept)
                    rebuild.update(span)
            clock = time.perf_counter()
            update = LiveUpdate(run_id)
            reader = AttemptReader(conn, facts)
            batches = sorted({m.batch_id for m in marks if m.batch_id is not None})
            new = reader.new_rows(batches, min(touched), max(touched)) if batches else None
            clock = update.stage("new rows", clock)
            if held is None and _every_attempt_of_the_run(new, facts, reader):
                # A new run's first update: its minutes start empty and take the new
                # rows, not read a second time.
                states = {m: MinuteState(m) for m in sorted(touched)}
                empty_from = 0  # no other attempt anywhere
            new_tools = fetch_new_tools(conn, run_id, batches) if reader.has_tools else []
            changed = []
            if new is not None and new.height:
                changed = reader.new_dependents()
            for low, high in _ranges_bounds(reader, rebuild):
                changed += dependents_in_range(conn, run_id, low, high)
            new_keys = _new_among(changed, new)
            # Attempts already folded whose flags the new rows changed: taken out with the
            # flags the last update saw and put back with today's (every mark names its
            # commit), else their minutes are read again.
            adjust: dict[tuple[str, str], None] = {}
            for dependent in changed:
                began = max(dependent.began_ns, dependent.end_ns - MAX_INTERVAL_NS)
                span = minute_span(began, dependent.end_ns)
                touched.update(span)
                key = (dependent.trace_id, dependent.span_id)
                if key in new_keys:
                    continue  # folded with the flags probed now
                if rebuild or dependent.values_changed:
                    # A mark without its commit (the old flags are not known), or an
                    # HTTP attempt whose call's values arrived: read the minutes whole.
                    rebuild.update(span)
                else:
                    adjust[key] = None
            # Attempts a new tool span overlaps: only their end minute's held time changes.
            held_changed = tool_dependents(conn, run_id, new_tools)
            new_keys |= _keys_among([(t, s) for t, s, _, _ in held_changed], new)
            for trace_id, span_id, _, end_ns in held_changed:
                key, end_minute = (trace_id, span_id), end_ns - end_ns % MINUTE_NS
                touched.add(end_minute)
                if key in new_keys:
                    continue
                if rebuild:
                    rebuild.add(end_minute)
                else:
                    adjust[key] = None
            del new_keys, changed, held_changed
            clock = update.stage("dependents", clock)
            if empty_from is not None:
                # A minute no update touched since the run's first holds only these
                # commits' rows: it starts empty and takes them, not read whole (a
                # burst's next minute read its first ~10 s of rows a second time).
                for minute in touched - rebuild - states.keys():
                    if minute >= empty_from:
                        states[minute] = MinuteState(minute)
            folded = {m: states[m] for m in sorted(touched) if m in states and m not in rebuild}
            update.minutes = len(touched)
            if new is not None and folded:
                fold_ending(folded, new)
                fold_overlap(folded, new)
                update.attempts_read += _rows_in(new, folded)
            for tool_start in (t[1] for t in new_tools):
                state = folded.get(tool_start - tool_start % MINUTE_NS)
                if state is not None:
                    state.tool_spans += 1
            if adjust and folded:
                update.attempts_read += reader.refold(folded, list(adjust), batches)
                for minute in [m for m, s in folded.items() if s.broken]:
                    del folded[minute]  # read whole again below
            untouched = {m: s for m, s in states.items() if m not in touched}
            del new, states
            clock = update.stage("fold", clock)
            built = {m: MinuteState(m) for m in sorted(touched) if m not in folded}
            for minutes in contiguous_ranges(built):
                update.attempts_read += reader.build({m: built[m] for m in minutes})
            clock = update.stage("build", clock)
            current = folded | built
            caps = known_caps(conn, run_id)
            frames = [
                minute_rows([current[m] for m in minutes], caps)
                for minutes in contiguous_ranges(touched)
            ]
            rows = pl.concat(frames) if frames else None
            # The run's largest request timeout: deadline of attempts declaring none.
            known_timeout = known_max_timeout(conn, run_id)
            run_timeout = max(
                [t for t in [known_timeout, *(s.max_timeout for s in current.values())]
                 if t is not None],
                default=None,
            )  # fmt: skip
            facts_rows = [minute_facts(current[m], run_timeout) for m in sorted(touched)]
            extras = [e for m in sorted(touched) for e in minute_extras(current[m])]
            for state in current.values():
                state.done()
            _add_work_seconds(facts_rows, rows)
            clock = update.stage("emit", clock)
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
        update.stage("write", clock)
        # Kept once the transaction committed: the states of the newest minutes, this
        # update's and those it left alone (a late attempt into an old minute does not
        # drop the busy minute's state); older ones are read again if touched.
        held_now = untouched | current
        kept = _within_budget(held_now)
        let_go = held_now.keys() - kept.keys()
        if empty_from is not None and let_go:
            empty_from = max(empty_from, max(let_go) + MINUTE_NS)
        self.states[run_id] = RunStates(generation, kept, empty_from)
        update.cpu_s = time.process_time() - cpu
        backend_after = backend_cpu_s(self.connection())
        if backend is not None and backend_after is not None and backend[0] == backend_after[0]:
            update.backend_cpu_s = max(0.0, backend_after[1] - backend[1])
        update.wall_s = time.perf_counter() - started
        return update

    def held_values(self, run_id: str) -> tuple[int, int]:
        """(values, bytes) of per-attempt values the run's kept states hold: TTFT and
        latency per attempt, no attempt rows (tests check the live path stays bounded)."""
        held = self.states.get(run_id)
        if held is None:
            return 0, 0
        minutes = held.minutes.values()
        return sum(s.values_held() for s in minutes), sum(s.nbytes() for s in minutes)


def _every_attempt_of_the_run(
    new: pl.DataFrame | None, facts: LiveRunFacts, reader: AttemptReader
) -> bool:
    """Whether the commits' rows ``new`` are every attempt the run has stored (its count in
    ``runs``, read in the same snapshot), and it has no tool spans: folded into empty
    minutes they give what reading those minutes whole gives."""
    return new is not None and new.height == facts.attempts > 0 and not reader.has_tools


def _within_budget(kept: dict[int, MinuteState]) -> dict[int, MinuteState]:
    """The newest minutes' states, then older ones while their values fit in KEPT_BYTES."""
    newest = max(kept)
    out: dict[int, MinuteState] = {}
    held = 0
    for minute in sorted(kept, reverse=True):
        if minute >= newest - KEPT_MINUTES * MINUTE_NS:
            out[minute] = kept[minute]
            continue
        held += kept[minute].nbytes()
        if held > KEPT_BYTES:
            break
        out[minute] = kept[minute]
    return out


def _new_among(changed: list[Dependent], new: pl.DataFrame | None) -> set[tuple[str, str]]:
    """The keys of ``changed`` attempts that are among the ``new`` rows (folded with the
    flags probed now: their minutes need not be read again for them)."""
    if not changed or new is None:
        return set()
    keys = pl.DataFrame(
        {"trace_id": [d.trace_id for d in changed], "span_id": [d.span_id for d in changed]},
        schema={"trace_id": pl.String, "span_id": pl.String},
    )
    return set(keys.join(new.select(KEYS), on=KEYS, how="semi").iter_rows())


def _keys_among(keys: list[tuple[str, str]], new: pl.DataFrame | None) -> set[tuple[str, str]]:
    """Those of ``keys`` that are among the ``new`` rows."""
    if not keys or new is None:
        return set()
    frame = pl.DataFrame(keys, schema={"trace_id": pl.String, "span_id": pl.String}, orient="row")
    return set(frame.join(new.select(KEYS), on=KEYS, how="semi").iter_rows())


def _rows_in(rows: pl.DataFrame, states: dict[int, MinuteState]) -> int:
    """How many of ``rows`` end in a minute of ``states``."""
    minute = (pl.col("end_ns") // MINUTE_NS) * MINUTE_NS
    keys = pl.Series(list(states), dtype=pl.Int64).implode()
    return rows.filter(minute.is_in(keys)).height


def _ranges_bounds(reader: AttemptReader, minutes: set[int]) -> list[tuple[int, int]]:
    return [reader.bounds(m) for m in contiguous_ranges(minutes)]


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
