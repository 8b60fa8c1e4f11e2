"""Runs joined with their newest sealed snapshot: the rows the runs, run and sweep pages read.

Reads the ``runs``, ``snapshots`` and ``snapshot_diagnostics`` tables only (never raw spans
per request). Each row says whether the run is *live* (ingest stored data after its newest
snapshot, or none exists) and whether that snapshot covers the run (``uncovered``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from tpmledger.durations import MINUTE_NS

# One query for both the runs page and the run page; the latest snapshot is picked with a
# LATERAL join so a run with many versions reads one snapshot row.
_RUNS_SQL = f"""
SELECT r.run_id, r.first_event_ns, r.last_event_ns, r.shard_ids, r.declared_shard_count,
       r.archived_at,
       r.concurrency_cap, r.sweep_id, r.attempts, r.updated_at,
       s.version, s.seal, s.previous_seal, s.events_sha256, s.events_count, s.merkle_root,
       s.tree_size, s.computed_at, s.data_as_of, s.metrics, s.final,
       s.document -> 'rebased' AS rebased, s.through AS through_minute_utc,
       (SELECT d.diagnostics -> 'late_attempts' -> 'minutes' FROM snapshot_diagnostics d
        WHERE d.run_id = s.run_id AND d.version = s.version) AS late_minutes,
       (s.version IS NULL OR r.updated_at > s.data_as_of OR s.partial) AS uncovered,
       (s.version IS NULL OR r.updated_at > s.data_as_of OR NOT s.final) AS live
FROM runs r
LEFT JOIN LATERAL (
    SELECT sn.*, sn.document -> 'minutes' ->> 'through_minute_utc' AS through,
           -- a checkpoint: its tree ends before the run's last minute
           (sn.document -> 'minutes' ->> 'through_minute_utc')::timestamptz
               < to_timestamp((r.last_event_ns / {MINUTE_NS}) * 60) AS partial
    FROM snapshots sn WHERE sn.run_id = r.run_id ORDER BY sn.version DESC LIMIT 1
) s ON true
"""


def run_rows(session: Session) -> Sequence[Any]:
    """Every run, most recent activity first."""
    return session.execute(text(_RUNS_SQL + " ORDER BY r.last_event_ns DESC, r.run_id")).all()


def run_row(session: Session, run_id: str) -> Any | None:
    """One run's row, or ``None`` when ingest never saw it."""
    return session.execute(
        text(_RUNS_SQL + " WHERE r.run_id = :run_id"), {"run_id": run_id}
    ).first()


def sweep_run_rows(session: Session, sweep_id: str) -> Sequence[Any]:
    """The rows of one cap sweep's runs, by cap."""
    return session.execute(
        text(_RUNS_SQL + " WHERE r.sweep_id = :sweep_id ORDER BY r.concurrency_cap, r.run_id"),
        {"sweep_id": sweep_id},
    ).all()


def sweep_ids(session: Session) -> list[str]:
    """Every sweep id some run declared, sorted."""
    rows = session.execute(
        text("SELECT DISTINCT sweep_id FROM runs WHERE sweep_id IS NOT NULL ORDER BY 1")
    )
    return [r[0] for r in rows]


def sealed_run_ids(session: Session) -> list[str]:
    """Every run with a sealed version, sorted by id."""
    rows = session.execute(text("SELECT DISTINCT run_id FROM snapshots ORDER BY run_id"))
    return [str(r[0]) for r in rows]
