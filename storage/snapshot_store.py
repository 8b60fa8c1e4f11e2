"""Writes of sealed snapshots and their minute rows (one transaction, the caller's session).

Snapshots are immutable (a trigger refuses UPDATE/DELETE); a new seal is a new version.
Sealers of one run serialize on a transaction-scoped advisory lock, so a second sealer
(the worker and ``tpmledger analyze`` at the same moment) waits, then sees the first one's
version; the (run_id, version) primary key still guards against forks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, insert, select, text
from sqlalchemy.orm import Session

from storage.models import MinuteMetric, Snapshot


def lock_run_for_sealing(session: Session, run_id: str) -> None:
    """Hold the run's sealing lock until the caller's transaction ends."""
    session.execute(
        text("SELECT pg_advisory_xact_lock(hashtextextended(:run_id, 0))"), {"run_id": run_id}
    )


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
    session: Session, snapshot: dict[str, Any], minute_rows: Sequence[dict[str, Any]]
) -> None:
    """Store one sealed snapshot row and its minute_metrics rows."""
    session.add(Snapshot(**snapshot))
    session.flush()
    if minute_rows:
        session.execute(insert(MinuteMetric), list(minute_rows))


def snapshot_count(session: Session, run_id: str) -> int:
    """How many versions ``run_id`` has."""
    return int(
        session.scalar(select(func.count()).select_from(Snapshot).where(Snapshot.run_id == run_id))
        or 0
    )
