"""Writes of sealed snapshots and their minute rows (one transaction, the caller's session).

Snapshots are immutable (a trigger refuses UPDATE/DELETE); a new seal is a new version.
Sealers of one run serialize on a transaction-scoped advisory lock, so a second sealer
(the worker and ``tpmledger analyze`` at the same moment) waits, then sees the first one's
version; the (run_id, version) primary key still guards against forks. Worker replicas
also claim a run before computing it (:func:`sealing_claim`), so two do not compute the
same seal (docs/operations.md#replicas).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from tpmledger.durations import MINUTE_NS
from tpmledger.storage.schema.models import MinuteMetric, Snapshot
from tpmledger.storage.server.database import libpq_url
from tpmledger.storage.writers.minute_versions import changed_rows, rows_as_of


def lock_run_for_sealing(session: Session, run_id: str) -> None:
    """Hold the run's sealing lock until the caller's transaction ends."""
    session.execute(
        text("SELECT pg_advisory_xact_lock(hashtextextended(:run_id, 0))"), {"run_id": run_id}
    )


@contextmanager
def sealing_claim(url: str, run_id: str) -> Iterator[bool]:
    """Claim the run for sealing across processes (replicas of the analytics worker):
    yields True while this process holds the run's claim, False when another one does
    (it is sealing the run right now; skip it). The claim is a session-level advisory
    lock on a connection of its own, released on exit or when the process dies."""
    with psycopg.connect(libpq_url(url), autocommit=True, connect_timeout=5) as conn:
        row = conn.execute(_TRY_CLAIM, (run_id,)).fetchone()
        claimed = bool(row and row[0])
        try:
            yield claimed
        finally:
            if claimed and not conn.closed:
                conn.execute(_RELEASE_CLAIM, (run_id,))


# Key space 1 (the transaction lock above uses 0): a claim never blocks a seal's commit.
_TRY_CLAIM = "SELECT pg_try_advisory_lock(hashtextextended(%s, 1))"
_RELEASE_CLAIM = "SELECT pg_advisory_unlock(hashtextextended(%s, 1))"


def latest_version(session: Session, run_id: str) -> tuple[int, str | None]:
    """(newest version, its seal) of ``run_id``; (0, None) when never sealed."""
    row = session.execute(
        select(Snapshot.version, Snapshot.seal)
        .where(Snapshot.run_id == run_id)
        .order_by(Snapshot.version.desc())
        .limit(1)
    ).first()
    return (int(row[0]), str(row[1])) if row else (0, None)


def insert_snapshot(
    session: Session, snapshot: dict[str, Any], minute_rows: Iterable[dict[str, Any]]
) -> int:
    """Store one sealed snapshot row and the minute rows that changed since the version
    before it (storage/writers/minute_versions.py); returns how many minute rows were stored.

    The minute rows (thousands per seal: every shard's minutes and the run's) go in with
    one ``COPY`` on the session's own connection and transaction; a multi-row INSERT
    of them bound ~130,000 parameters per million-attempt seal. A first version's rows
    are written as ``minute_rows`` yields them (an iterator keeps only a batch in memory);
    a later version's are compared with the previous version's first.
    """
    previous = int(snapshot["version"]) - 1
    if previous > 0:
        rows = list(minute_rows)
        if rows:
            query = text(rows_as_of(":run_id", ":version"))
            found = session.execute(query, {"run_id": snapshot["run_id"], "version": previous})
            rows = changed_rows([dict(row._mapping) for row in found], rows)
        minute_rows = rows
    session.add(Snapshot(**snapshot))
    session.flush()
    if isinstance(minute_rows, list) and not minute_rows:
        return 0
    columns = [column.name for column in MinuteMetric.__table__.columns]
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(MinuteMetric.__tablename__),
        sql.SQL(", ").join(sql.Identifier(name) for name in columns),
    )
    driver = session.connection().connection.driver_connection
    if not isinstance(driver, psycopg.Connection):
        raise TypeError("minute rows are copied over psycopg (3) connections only")
    written = 0
    with driver.cursor() as cursor, cursor.copy(statement) as copy:
        for row in minute_rows:
            copy.write_row([row.get(name) for name in columns])
            written += 1
    return written


def snapshot_count(session: Session, run_id: str) -> int:
    """How many versions ``run_id`` has."""
    return int(
        session.scalar(select(func.count()).select_from(Snapshot).where(Snapshot.run_id == run_id))
        or 0
    )


def late_attempts_by_minute(
    session: Session, run_id: str, received_after: datetime, end_before_ns: int
) -> list[tuple[int, int]]:
    """(minute_ns, attempts) of every minute with attempts stored after ``received_after``
    (a version's ``data_as_of``) that end before ``end_before_ns`` (the end of that
    version's last minute): late data, minute by minute."""
    rows = session.execute(
        text(
            f"SELECT end_ns - end_ns % {MINUTE_NS} AS minute_ns, count(*) FROM attempts "
            "WHERE run_id = :run AND end_ns < :end AND received_at > :after "
            "GROUP BY 1 ORDER BY 1"
        ),
        {"run": run_id, "end": end_before_ns, "after": received_after},
    ).all()
    return [(int(minute), int(count)) for minute, count in rows]
