"""Retention in the database: which runs are due (by when their spans arrived), deleting
the raw spans an archive holds, and marking the run archived
(docs/configuration.md#retention, docs/operations.md#retention-and-archives).

The delete and the mark are one transaction that holds the run's ``runs`` row: ingest
commits of other runs go on; a commit of this run waits, then refuses its spans. Seals,
snapshot documents, minute rows, diagnostics and goodput stay: the run keeps its figures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime

import psycopg
from sqlalchemy import text
from sqlalchemy.orm import Session

from tpmledger.storage.server.database import libpq_url, transaction

DELETE_BATCH = 10_000
_RAW_TABLES = ("attempts", "tool_spans")


class RunArchived(LookupError):
    """The run's raw spans were pruned: nothing can be recomputed or exported from them."""

    def __init__(self, run_id: str, when: datetime, where: str) -> None:
        super().__init__(
            f"run {run_id!r} was archived on {when:%Y-%m-%d %H:%M} UTC and its raw spans "
            f"deleted; its signed summary and event file are in {where}"
        )
        self.archive_dir = where


def refuse_if_archived(session: Session, run_id: str) -> None:
    """Raise :class:`RunArchived` for an archived run."""
    gone = archived(session, run_id)
    if gone is not None:
        raise RunArchived(run_id, *gone)


@dataclass(frozen=True)
class OldRun:
    """A run whose newest stored span arrived before the cutoff."""

    run_id: str
    last_event_ns: int
    attempts: int
    last_arrival: datetime


def runs_older_than(session: Session, cutoff: datetime) -> list[OldRun]:
    """Runs not archived yet whose newest stored span arrived before ``cutoff``
    (``runs.updated_at``: every ingest commit that stores a span of the run sets it),
    longest quiet first. Event times do not matter: a backfilled run whose events are
    days old is not due while its spans still arrive."""
    rows = session.execute(
        text(
            "SELECT run_id, last_event_ns, attempts, updated_at FROM runs "
            "WHERE archived_at IS NULL AND updated_at < :cutoff ORDER BY updated_at, run_id"
        ),
        {"cutoff": cutoff},
    )
    return [OldRun(str(r[0]), int(r[1]), int(r[2]), r[3]) for r in rows]


def archived(session: Session, run_id: str) -> tuple[datetime, str] | None:
    """(when, where) the run was archived, or ``None``."""
    row = session.execute(
        text(
            "SELECT archived_at, archive_dir FROM runs "
            "WHERE run_id = :r AND archived_at IS NOT NULL"
        ),
        {"r": run_id},
    ).first()
    return (row[0], str(row[1])) if row is not None else None


# Key space 2 of the session-level advisory locks (0: a run's seal, 1: a run's sealing
# claim): one key for the whole database.
_PRUNE_LOCK_KEY = "tpmledger prune"
_LOCK = "SELECT pg_advisory_lock(hashtextextended(%s, 2))"
_TRY_LOCK = "SELECT pg_try_advisory_lock(hashtextextended(%s, 2))"
_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended(%s, 2))"


@contextmanager
def prune_lock(
    url: str, *, wait: bool = True, waiting: Callable[[], None] | None = None
) -> Iterator[bool]:
    """One prune at a time per database: yields True while this process holds the
    database's prune lock (a session-level advisory lock on a connection of its own,
    released on exit or when the process dies). ``wait`` blocks until a running prune
    finishes (``waiting`` is called once first, when it is busy); without it, yields False
    at once when another prune holds the lock."""
    with psycopg.connect(libpq_url(url), autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(_TRY_LOCK, (_PRUNE_LOCK_KEY,)).fetchone()
        held = bool(row and row[0])
        if not held and wait:
            if waiting is not None:
                waiting()
            conn.execute(_LOCK, (_PRUNE_LOCK_KEY,))
            held = True
        try:
            yield held
        finally:
            if held and not conn.closed:
                conn.execute(_UNLOCK, (_PRUNE_LOCK_KEY,))


class ArrivedMeanwhile(RuntimeError):
    """Spans of the run arrived (or it was sealed again) after its archive was made."""


def delete_archived_spans(
    url: str,
    run_id: str,
    stored_by: datetime,
    archive_dir: str,
    progress: Callable[[int], None] | None = None,
    before_commit: Callable[[], None] | None = None,
) -> int:
    """Delete the raw spans an archive holds and mark the run archived, in one
    transaction; returns how many rows went.

    The archive holds every span the run had stored when its ``updated_at`` was
    ``stored_by`` (the seal's snapshot). The ``runs`` row is locked first (ingest's
    commit upserts it, so a commit storing spans of this run either finished before, or
    waits and then finds the run archived and refuses its spans). Rows are deleted only if
    nothing arrived since: ``updated_at`` is still ``stored_by``. Otherwise
    :class:`ArrivedMeanwhile` is raised and nothing changes. ``before_commit`` runs last
    inside the transaction (prune renames the verified archive into place there): when it
    raises, nothing is deleted.
    """
    deleted = 0
    with transaction(url) as session:
        row = session.execute(
            text(
                "SELECT updated_at FROM runs WHERE run_id = :r AND archived_at IS NULL FOR UPDATE"
            ),
            {"r": run_id},
        ).first()
        if row is None or row[0] != stored_by:
            raise ArrivedMeanwhile(f"run {run_id!r} received spans while it was archived")
        for table in _RAW_TABLES:
            while True:
                # Both levels name the run: on Citus the statement then goes whole to the
                # one shard holding the run (a ctid is a row's place within one shard only).
                result = session.execute(
                    text(
                        f"DELETE FROM {table} WHERE run_id = :r AND ctid IN "
                        f"(SELECT ctid FROM {table} WHERE run_id = :r LIMIT :n)"
                    ),
                    {"r": run_id, "n": DELETE_BATCH},
                )
                gone = max(int(getattr(result, "rowcount", 0)), 0)
                deleted += gone
                if progress is not None:
                    progress(deleted)
                if gone < DELETE_BATCH:
                    break
        session.execute(text("DELETE FROM live_minutes WHERE run_id = :r"), {"r": run_id})
        session.execute(text("DELETE FROM live_run_minutes WHERE run_id = :r"), {"r": run_id})
        session.execute(text("DELETE FROM live_dirty WHERE run_id = :r"), {"r": run_id})
        session.execute(
            text("UPDATE runs SET archived_at = now(), archive_dir = :d WHERE run_id = :r"),
            {"r": run_id, "d": archive_dir},
        )
        if before_commit is not None:
            before_commit()
    return deleted


def stored_bytes(session: Session) -> dict[str, int]:
    """Bytes each run takes in the tables that grow with it (raw spans, minute rows,
    snapshot documents), as PostgreSQL stores its rows (``pg_column_size``; indexes not
    counted). Reads every row: for the command line, not for pages."""
    rows = session.execute(
        text(
            """
            SELECT run_id, sum(size)::bigint FROM (
                SELECT run_id, pg_column_size(a.*) AS size FROM attempts a
                UNION ALL SELECT run_id, pg_column_size(t.*) FROM tool_spans t
                UNION ALL SELECT run_id, pg_column_size(m.*) FROM minute_metrics m
                UNION ALL SELECT run_id, pg_column_size(s.*) FROM snapshots s
            ) sizes GROUP BY run_id
            """
        )
    )
    return {str(run_id): int(size) for run_id, size in rows}


def server_minutes_bound(
    session: Session, cutoff: datetime, leaving: Sequence[str] = ()
) -> datetime:
    """Where server metrics may go: before ``cutoff`` and a minute before the first event of
    every run whose spans are still stored, ``leaving`` aside (a run recomputed or verified
    from the database joins the server minutes of its own time,
    docs/metrics.md#serving-side-metrics)."""
    earliest = session.execute(
        text(
            "SELECT to_timestamp(min(first_event_ns) / 1e9) - interval '1 minute' "
            "FROM runs WHERE archived_at IS NULL AND NOT (run_id = ANY(:leaving))"
        ),
        {"leaving": list(leaving)},
    ).scalar()
    return cutoff if earliest is None else min(cutoff, earliest)


def count_old_server_minutes(session: Session, cutoff: datetime, leaving: Sequence[str]) -> int:
    """How many server minutes :func:`delete_old_server_metrics` would delete once the runs
    ``leaving`` are archived (a dry run's figure)."""
    bound = server_minutes_bound(session, cutoff, leaving)
    found = session.execute(
        text("SELECT count(*) FROM server_metric_minutes WHERE minute_utc < :b"), {"b": bound}
    ).scalar()
    return int(found or 0)


def delete_old_server_metrics(url: str, cutoff: datetime) -> int:
    """Delete the serving side's minutes older than :func:`server_minutes_bound` and the
    counter baselines of streams silent since ``cutoff``; returns how many minutes went.

    The bound is read first and the delete takes it as a value: on Citus the minutes are a
    reference table and ``runs`` is distributed, which one statement does not join."""
    with transaction(url) as session:
        bound = server_minutes_bound(session, cutoff)
        result = session.execute(
            text("DELETE FROM server_metric_minutes WHERE minute_utc < :b"), {"b": bound}
        )
        session.execute(
            text("DELETE FROM server_metric_streams WHERE updated_at < :c"), {"c": cutoff}
        )
    return max(int(getattr(result, "rowcount", 0)), 0)
