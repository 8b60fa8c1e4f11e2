"""Writes of sealed snapshots and their minute rows (one transaction, the caller's session).

Snapshots are immutable (a trigger refuses UPDATE/DELETE); a new seal is a new version.
Two sealers racing for the same version collide on the (run_id, version) primary key and
the loser's transaction rolls back, so versions never fork.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from storage.models import MinuteMetric, Snapshot


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
