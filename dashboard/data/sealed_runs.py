"""Runs that can be compared: those with at least one sealed version."""

from __future__ import annotations

from sqlalchemy import text

from storage.database import read_session


def list_sealed_run_ids(url: str) -> list[str]:
    """Every run with a sealed version, sorted by id."""
    with read_session(url) as session:
        rows = session.execute(text("SELECT DISTINCT run_id FROM snapshots ORDER BY run_id"))
        return [str(r[0]) for r in rows]
