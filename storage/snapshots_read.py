"""Read-side queries over sealed snapshots that several parts need."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import func, select

from storage.database import read_session
from storage.models import Snapshot


def latest_seals(url: str, run_ids: Sequence[str]) -> dict[str, str]:
    """The seal of each run's newest snapshot; runs never sealed are absent."""
    if not run_ids:
        return {}
    newest = (
        select(Snapshot.run_id, func.max(Snapshot.version).label("version"))
        .where(Snapshot.run_id.in_(run_ids))
        .group_by(Snapshot.run_id)
        .subquery()
    )
    query = select(Snapshot.run_id, Snapshot.seal).join(
        newest, (Snapshot.run_id == newest.c.run_id) & (Snapshot.version == newest.c.version)
    )
    with read_session(url) as session:
        return {run_id: seal for run_id, seal in session.execute(query)}
