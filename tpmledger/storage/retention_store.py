"""Retention in the database: which runs are old, deleting a run's raw spans in batches,
and marking it archived (docs/configuration.md#retention).

Raw spans go in batches of :data:`DELETE_BATCH` rows, one short transaction each, so no
long lock is held on ``attempts`` while ingest writes other runs. Seals, snapshot
documents, minute rows, diagnostics and goodput stay: the run keeps its figures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text
from sqlalchemy.orm import Session

from tpmledger.storage.database import transaction

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
    """A run whose last event ended before the cutoff."""

    run_id: str
    last_event_ns: int
    attempts: int


def runs_older_than(session: Session, cutoff_ns: int) -> list[OldRun]:
    """Runs not archived yet whose last event ended before ``cutoff_ns``, oldest first."""
    rows = session.execute(
        text(
            "SELECT run_id, last_event_ns, attempts FROM runs "
            "WHERE archived_at IS NULL AND last_event_ns < :cutoff ORDER BY last_event_ns, run_id"
        ),
        {"cutoff": cutoff_ns},
    )
    return [OldRun(str(r[0]), int(r[1]), int(r[2])) for r in rows]


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


def delete_raw_spans(url: str, run_id: str, progress: Callable[[int], None] | None = None) -> int:
    """Delete the run's attempts and tool spans (and its live rows) in batches; returns
    how many rows went. ``progress`` is told the running count after each batch."""
    deleted = 0
    for table in _RAW_TABLES:
        while True:
            with transaction(url) as session:
                result = session.execute(
                    text(
                        f"DELETE FROM {table} WHERE ctid IN "
                        f"(SELECT ctid FROM {table} WHERE run_id = :r LIMIT :n)"
                    ),
                    {"r": run_id, "n": DELETE_BATCH},
                )
                gone = int(getattr(result, "rowcount", 0))
            deleted += max(gone, 0)
            if progress is not None:
                progress(deleted)
            if gone < DELETE_BATCH:
                break
    with transaction(url) as session:
        session.execute(text("DELETE FROM live_minutes WHERE run_id = :r"), {"r": run_id})
        session.execute(text("DELETE FROM live_run_minutes WHERE run_id = :r"), {"r": run_id})
        session.execute(text("DELETE FROM live_dirty WHERE run_id = :r"), {"r": run_id})
    return deleted


def mark_archived(url: str, run_id: str, archive_dir: str) -> None:
    """Record that the run's raw spans are gone and where its archive is."""
    with transaction(url) as session:
        session.execute(
            text("UPDATE runs SET archived_at = now(), archive_dir = :d WHERE run_id = :r"),
            {"r": run_id, "d": archive_dir},
        )


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
