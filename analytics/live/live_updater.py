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

This module drains the marks, retries, and keeps each run's states between updates; the
steps of one update (which minutes, folded or read whole, what is written) are
:mod:`analytics.live.run_update`'s.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import psycopg

from tpmledger.analytics.live.minute_state import MinuteState
from tpmledger.analytics.live.run_update import LiveUpdate, RunUpdate
from tpmledger.durations import MINUTE_NS
from tpmledger.storage.server.backend_cpu import backend_cpu_s
from tpmledger.storage.server.database import in_one_snapshot
from tpmledger.storage.writers.live_store import (
    connect_live,
    dirty_run_ids,
    live_run_facts,
    live_transaction,
    summarize_new_batches,
    take_marks,
)

__all__ = ["KEPT_BYTES", "KEPT_MINUTES", "LiveUpdate", "LiveUpdater", "RunStates"]

log = logging.getLogger("tpmledger.analytics.live")


SERIALIZATION_TRIES = 5


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
            update = LiveUpdate(run_id)
            run = RunUpdate.read(
                conn,
                facts,
                marks,
                held.minutes if held is not None else None,
                held.empty_from_ns if held is not None else None,
                update,
            )
            current, untouched = run.fold()
            run.write(current)
        update.stage("write", run.clock)
        # Kept once the transaction committed: the states of the newest minutes, this
        # update's and those it left alone (a late attempt into an old minute does not
        # drop the busy minute's state); older ones are read again if touched.
        held_now = untouched | current
        kept = _within_budget(held_now)
        let_go = held_now.keys() - kept.keys()
        empty_from = run.empty_from
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
