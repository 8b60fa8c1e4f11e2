"""Runs that can be compared: those with at least one sealed version."""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session


def list_sealed_run_ids(session: Session) -> list[str]:
    """Every run with a sealed version, sorted by id."""
    rows = session.execute(text("SELECT DISTINCT run_id FROM snapshots ORDER BY run_id"))
    return [str(r[0]) for r in rows]
