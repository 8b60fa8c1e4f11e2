"""Writes and reads of the figures sealed with a version beside its snapshot row.

``snapshot_diagnostics`` (one row per version) and ``snapshot_goodput`` (one row per
version and SLO) are written once, in the sealing transaction, and never changed: a
second write of the same key does nothing. Reads are by (run, version) and serve the API,
the CLI and the dashboard without touching attempts.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from tpmledger.storage.schema.models import Run, SnapshotDiagnostics, SnapshotGoodput


def store_diagnostics(
    session: Session,
    run_id: str,
    version: int,
    diagnostics: dict[str, Any],
    minute_outcomes: dict[str, Any],
    params: dict[str, Any],
) -> None:
    """Store a version's diagnostics and minute outcomes (kept if already stored)."""
    session.execute(
        insert(SnapshotDiagnostics)
        .values(
            run_id=run_id,
            version=version,
            diagnostics=diagnostics,
            minute_outcomes=minute_outcomes,
            params=params,
            computed_at=datetime.now(UTC),
        )
        .on_conflict_do_nothing()
    )


def store_goodput(
    session: Session, run_id: str, version: int, slo_text: str, figures: dict[str, Any]
) -> None:
    """Store a version's goodput under one SLO (kept if already stored)."""
    session.execute(
        insert(SnapshotGoodput)
        .values(
            run_id=run_id,
            version=version,
            slo=slo_text,
            figures=figures,
            computed_at=datetime.now(UTC),
        )
        .on_conflict_do_nothing()
    )


def read_diagnostics(session: Session, run_id: str, version: int) -> SnapshotDiagnostics | None:
    """A version's stored diagnostics row (detached), or None if never computed."""
    return session.get(SnapshotDiagnostics, (run_id, version))


def read_goodput(
    session: Session, run_id: str, version: int, slo_text: str
) -> dict[str, Any] | None:
    """A version's stored goodput figures under ``slo_text``, or None."""
    row = session.get(SnapshotGoodput, (run_id, version, slo_text))
    return row.figures if row is not None else None


def run_exists(session: Session, run_id: str) -> bool:
    """Whether anything was ever stored for ``run_id`` (it has a ``runs`` row)."""
    return session.get(Run, run_id) is not None
