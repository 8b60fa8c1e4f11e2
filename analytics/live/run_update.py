"""One live update of one run, inside its transaction: the minutes it touches, how each
gets its state, and what it writes (docs/metrics.md#live-figures).

:class:`~analytics.live.live_updater.LiveUpdater` takes the run's marks and hands them here
with the minute states it kept from the run's last update. :meth:`RunUpdate.read` reads
the rows of the commits the marks name and the attempts they change, and decides for each
touched minute whether its state is folded (kept, or started empty) or read whole;
:meth:`RunUpdate.fold` brings every touched minute's state up to date; and
:func:`write_minutes` replaces those minutes' live rows, run facts and extras with what the
states give.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
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
from tpmledger.storage.writers.live_store import (
    LiveRunFacts,
    Mark,
    known_caps,
    known_max_timeout,
    mark_stale_caps,
    mark_stale_timeouts,
    replace_minutes,
    replace_run_minutes,
)
from tpmledger.storage.writers.minute_extras_store import replace_extras
from tpmledger.storage.writers.tool_span_store import fetch_new_tools, tool_dependents

log = logging.getLogger("tpmledger.analytics.live")

# Touched minutes further apart than this are read as separate windows.
WINDOW_GAP_MINUTES = 10
# Ingest refuses spans (and queue waits) longer than a day (docs/ingest.md#limits); an
# interval stored before that limit existed is followed back two days at most, so one
# span can never make an update walk millions of minutes.
MAX_INTERVAL_NS = 2 * 86_400 * SECOND_NS

Key = tuple[str, str]


@dataclass
class LiveUpdate:
    """What one run's update did (the benchmark prints it)."""

    run_id: str
    minutes: int = 0
    attempts_read: int = 0
    cpu_s: float = 0.0
    # CPU seconds its PostgreSQL backend used meanwhile, when the server runs on this
    # machine (storage.server.backend_cpu.backend_cpu_s); else 0.
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


@dataclass
class RunUpdate:
    """The working set of one run's update: which minutes it touches, which of them are
    read whole (``rebuild``), the states it folds into, and the new commits' rows."""

    conn: psycopg.Connection
    facts: LiveRunFacts
    report: LiveUpdate
    reader: AttemptReader
    batches: list[int]
    #: Minute -> state: kept from the run's last update (or started empty), folded.
    states: dict[int, MinuteState]
    #: A touched minute from here on without a state held no attempt before these
    #: commits (None: not known): see ``live_updater.RunStates``.
    empty_from: int | None
    touched: set[int]
    rebuild: set[int]
    new: pl.DataFrame | None = None
    new_tools: list[tuple[str, int, int]] = field(default_factory=list)
    # Attempts already folded whose flags the new rows changed: taken out with the flags
    # the last update saw and put back with today's.
    adjust: dict[Key, None] = field(default_factory=dict)
    clock: float = field(default_factory=time.perf_counter)

    @classmethod
    def read(
        cls,
        conn: psycopg.Connection,
        facts: LiveRunFacts,
        marks: Sequence[Mark],
        kept: dict[int, MinuteState] | None,
        empty_from: int | None,
        report: LiveUpdate,
    ) -> RunUpdate:
        """The minutes ``marks`` touch, the rows of the commits they name and the attempts
        those rows change. ``kept``: the states of the run's last update, when this
        updater made it; None otherwise, and every touched minute is read whole, unless
        the commits hold every attempt the run has (its first update)."""
        touched: set[int] = set()
        rebuild: set[int] = set()  # minutes read whole from the table
        for mark in marks:
            span = minute_span(_clipped(mark), mark.end_minute_ns)
            touched.update(span)
            if mark.batch_id is None:  # queued again (or before batches were kept)
                rebuild.update(span)
        batches = sorted({m.batch_id for m in marks if m.batch_id is not None})
        update = cls(
            conn, facts, report, AttemptReader(conn, facts), batches, kept or {}, empty_from,
            touched, rebuild,
        )  # fmt: skip
        update._read_new_rows(first=kept is None)
        update._take_dependents()
        update.report.minutes = len(touched)
        return update

    def _read_new_rows(self, first: bool) -> None:
        reader, touched = self.reader, self.touched
        if self.batches:
            self.new = reader.new_rows(self.batches, min(touched), max(touched))
        self.clock = self.report.stage("new rows", self.clock)
        if first and _every_attempt_of_the_run(self.new, self.facts, reader):
            # A new run's first update: its minutes start empty and take the new rows,
            # not read a second time.
            self.states = {m: MinuteState(m) for m in sorted(touched)}
            self.empty_from = 0  # no other attempt anywhere
        if reader.has_tools:
            self.new_tools = fetch_new_tools(self.conn, self.facts.run_id, self.batches)

    def _take_dependents(self) -> None:
        """Touch the minutes of the attempts the new rows change: each is adjusted in its
        kept state, or its minutes are read whole."""
        conn, run_id, new = self.conn, self.facts.run_id, self.new
        changed: list[Dependent] = []
        if new is not None and new.height:
            changed = self.reader.new_dependents()
        for minutes in contiguous_ranges(self.rebuild):
            low, high = self.reader.bounds(minutes)
            changed += dependents_in_range(conn, run_id, low, high)
        new_keys = _keys_among([(d.trace_id, d.span_id) for d in changed], new)
        for dependent in changed:
            began = max(dependent.began_ns, dependent.end_ns - MAX_INTERVAL_NS)
            span = minute_span(began, dependent.end_ns)
            self.touched.update(span)
            key = (dependent.trace_id, dependent.span_id)
            if key in new_keys:
                continue  # folded with the flags probed now
            if self.rebuild or dependent.values_changed:
                # A mark without its commit (the old flags are not known), or an HTTP
                # attempt whose call's values arrived: read the minutes whole.
                self.rebuild.update(span)
            else:
                self.adjust[key] = None
        # Attempts a new tool span overlaps: only their end minute's held time changes.
        held_changed = tool_dependents(conn, run_id, self.new_tools)
        new_keys |= _keys_among([(t, s) for t, s, _, _ in held_changed], new)
        for trace_id, span_id, _, end_ns in held_changed:
            key, end_minute = (trace_id, span_id), end_ns - end_ns % MINUTE_NS
            self.touched.add(end_minute)
            if key in new_keys:
                continue
            if self.rebuild:
                self.rebuild.add(end_minute)
            else:
                self.adjust[key] = None
        self.clock = self.report.stage("dependents", self.clock)

    def fold(self) -> tuple[dict[int, MinuteState], dict[int, MinuteState]]:
        """Bring every touched minute's state up to date: (the touched minutes' states, the
        kept states of minutes this update did not touch)."""
        touched, states, new, report = self.touched, self.states, self.new, self.report
        if self.empty_from is not None:
            # A minute no update touched since the run's first holds only these commits'
            # rows: it starts empty and takes them, not read whole (a burst's next minute
            # read its first ~10 s of rows a second time).
            for minute in touched - self.rebuild - states.keys():
                if minute >= self.empty_from:
                    states[minute] = MinuteState(minute)
        folded = {m: states[m] for m in sorted(touched) if m in states and m not in self.rebuild}
        if new is not None and folded:
            fold_ending(folded, new)
            fold_overlap(folded, new)
            report.attempts_read += _rows_in(new, folded)
        for tool_start in (t[1] for t in self.new_tools):
            state = folded.get(tool_start - tool_start % MINUTE_NS)
            if state is not None:
                state.tool_spans += 1
        if self.adjust and folded:
            report.attempts_read += self.reader.refold(folded, list(self.adjust), self.batches)
            for minute in [m for m, s in folded.items() if s.broken]:
                del folded[minute]  # read whole again below
        untouched = {m: s for m, s in states.items() if m not in touched}
        self.new, self.states = None, {}  # not held while the minutes are read
        self.clock = report.stage("fold", self.clock)
        built = {m: MinuteState(m) for m in sorted(touched) if m not in folded}
        for minutes in contiguous_ranges(built):
            report.attempts_read += self.reader.build({m: built[m] for m in minutes})
        self.clock = report.stage("build", self.clock)
        return folded | built, untouched

    def write(self, current: dict[int, MinuteState]) -> None:
        """Replace the touched minutes' live rows, run facts and extras with what their
        states (``current``) give."""
        conn, run_id, facts, report = self.conn, self.facts.run_id, self.facts, self.report
        minutes = sorted(self.touched)
        caps = known_caps(conn, run_id)
        frames = [
            minute_rows([current[m] for m in chunk], caps) for chunk in contiguous_ranges(minutes)
        ]
        rows = pl.concat(frames) if frames else None
        # The run's largest request timeout: deadline of attempts declaring none.
        known_timeout = known_max_timeout(conn, run_id)
        run_timeout = max(
            [t for t in [known_timeout, *(s.max_timeout for s in current.values())]
             if t is not None],
            default=None,
        )  # fmt: skip
        facts_rows = [minute_facts(current[m], run_timeout) for m in minutes]
        extras = [e for m in minutes for e in minute_extras(current[m])]
        for state in current.values():
            state.done()
        _add_work_seconds(facts_rows, rows)
        self.clock = report.stage("emit", self.clock)
        computed_at = datetime.now(UTC)
        records = []
        if rows is not None:
            for row in rows.to_dicts():
                row["minute_utc"] = _minute_utc(row.pop("minute_ns"))
                row.update(run_id=run_id, data_as_of=facts.updated_at, computed_at=computed_at)
                records.append(row)
        utc = [_minute_utc(m) for m in minutes]
        replace_minutes(conn, run_id, utc, records)
        for fact in facts_rows:
            fact["minute_utc"] = _minute_utc(fact.pop("minute_ns"))
            fact.update(run_id=run_id, data_as_of=facts.updated_at)
        replace_run_minutes(conn, run_id, utc, facts_rows)
        if run_timeout is not None and run_timeout != known_timeout:
            # A larger timeout declared now: minutes that used the old one go again.
            mark_stale_timeouts(conn, run_id, run_timeout)
        replace_extras(
            conn,
            run_id,
            utc,
            [(_minute_utc(m), kind, key, value) for m, kind, key, value in extras],
        )
        if rows is not None:
            # A larger cap declared now: minutes counted against the old one go again.
            mark_stale_caps(conn, run_id, _caps_of(rows, caps))


def _clipped(mark: Mark) -> int:
    if mark.end_minute_ns - mark.from_minute_ns > MAX_INTERVAL_NS:
        log.warning("an interval longer than two days is followed back two days only")
        return mark.end_minute_ns - MAX_INTERVAL_NS
    return mark.from_minute_ns


def _minute_utc(ns: int) -> datetime:
    return datetime.fromtimestamp(ns // SECOND_NS, tz=UTC)


def _every_attempt_of_the_run(
    new: pl.DataFrame | None, facts: LiveRunFacts, reader: AttemptReader
) -> bool:
    """Whether the commits' rows ``new`` are every attempt the run has stored (its count in
    ``runs``, read in the same snapshot), and it has no tool spans: folded into empty
    minutes they give what reading those minutes whole gives."""
    return new is not None and new.height == facts.attempts > 0 and not reader.has_tools


def _keys_among(keys: list[Key], new: pl.DataFrame | None) -> set[Key]:
    """Those of ``keys`` that are among the ``new`` rows (folded with the flags probed
    now: their minutes need not be read again for them)."""
    if not keys or new is None:
        return set()
    frame = pl.DataFrame(keys, schema={"trace_id": pl.String, "span_id": pl.String}, orient="row")
    return set(frame.join(new.select(KEYS), on=KEYS, how="semi").iter_rows())


def _rows_in(rows: pl.DataFrame, states: dict[int, MinuteState]) -> int:
    """How many of ``rows`` end in a minute of ``states``."""
    minute = (pl.col("end_ns") // MINUTE_NS) * MINUTE_NS
    keys = pl.Series(list(states), dtype=pl.Int64).implode()
    return rows.filter(minute.is_in(keys)).height


def _caps_of(rows: pl.DataFrame, known: dict[str, int]) -> dict[str, int]:
    """The run's cap per shard: the caps known before and those the rows declare."""
    caps = dict(known)
    declared = rows.filter(pl.col("shard_id") != WHOLE_RUN, pl.col("concurrency_cap").is_not_null())
    for shard, cap in declared.group_by("shard_id").agg(pl.col("concurrency_cap").max()).rows():
        caps[shard] = max(caps.get(shard, 0), int(cap))
    return caps


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
