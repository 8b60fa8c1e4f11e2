"""Runs joined with their latest sealed snapshot, and whether each run is live or sealed.

Reads the ``runs`` and ``snapshots`` tables only (SPEC §6: never raw spans per request).
A run is *live* when ingest stored data after its latest snapshot was computed
(``runs.updated_at > snapshots.data_as_of``, or no snapshot yet) or within the last two
minutes; otherwise it is *sealed*.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import text

from storage.database import read_session
from storage.runs_read import ns_to_rfc3339

LIVE_WINDOW = "2 minutes"

# One query for both the runs page and the run page; the latest snapshot is picked with a
# LATERAL join so a run with many versions reads one snapshot row.
_RUNS_SQL = f"""
SELECT r.run_id, r.first_event_ns, r.last_event_ns, r.shard_ids, r.declared_shard_count,
       r.concurrency_cap, r.sweep_id, r.attempts, r.updated_at,
       s.version, s.seal, s.previous_seal, s.events_sha256, s.events_count, s.merkle_root,
       s.tree_size, s.computed_at, s.data_as_of, s.metrics,
       (s.version IS NULL OR r.updated_at > s.data_as_of
        OR r.updated_at > now() - interval '{LIVE_WINDOW}') AS live
FROM runs r
LEFT JOIN LATERAL (
    SELECT * FROM snapshots sn WHERE sn.run_id = r.run_id ORDER BY sn.version DESC LIMIT 1
) s ON true
"""


@dataclass(frozen=True)
class SnapshotInfo:
    """The provenance columns of a run's newest sealed snapshot."""

    version: int
    seal: str
    previous_seal: str | None
    events_sha256: str
    events_count: int
    merkle_root: str
    tree_size: int
    computed_at: datetime
    data_as_of: datetime


@dataclass(frozen=True)
class RunRecord:
    """One run as the dashboard shows it: ingest's bookkeeping plus the latest snapshot."""

    run_id: str
    status: str  # "live" | "sealed"
    observed_shards: int
    declared_shard_count: int | None
    concurrency_cap: int | None
    sweep_id: str | None
    attempts: int
    first_event_utc: str | None
    last_event_utc: str | None
    snapshot: SnapshotInfo | None
    # The SPEC §8 run object stored with the snapshot; empty when never sealed.
    metrics: dict[str, Any]

    @property
    def is_live(self) -> bool:
        return self.status == "live"


def _record(row: Any) -> RunRecord:
    snapshot = None
    if row.version is not None:
        snapshot = SnapshotInfo(
            version=row.version,
            seal=row.seal,
            previous_seal=row.previous_seal,
            events_sha256=row.events_sha256,
            events_count=row.events_count,
            merkle_root=row.merkle_root,
            tree_size=row.tree_size,
            computed_at=row.computed_at,
            data_as_of=row.data_as_of,
        )
    return RunRecord(
        run_id=row.run_id,
        status="live" if row.live else "sealed",
        observed_shards=len(row.shard_ids or []),
        declared_shard_count=row.declared_shard_count,
        concurrency_cap=row.concurrency_cap,
        sweep_id=row.sweep_id,
        attempts=row.attempts,
        first_event_utc=ns_to_rfc3339(row.first_event_ns),
        last_event_utc=ns_to_rfc3339(row.last_event_ns),
        snapshot=snapshot,
        metrics=dict(row.metrics or {}),
    )


def load_runs(url: str) -> list[RunRecord]:
    """Every run, most recent activity first."""
    with read_session(url) as session:
        rows = session.execute(text(_RUNS_SQL + " ORDER BY r.last_event_ns DESC, r.run_id"))
        return [_record(row) for row in rows]


def load_run(url: str, run_id: str) -> RunRecord | None:
    """One run with its latest snapshot, or ``None`` when ingest never saw it."""
    with read_session(url) as session:
        row = session.execute(
            text(_RUNS_SQL + " WHERE r.run_id = :run_id"), {"run_id": run_id}
        ).first()
        return _record(row) if row is not None else None


def load_sweep_runs(url: str, sweep_id: str) -> list[RunRecord]:
    """The runs of one cap sweep (runs sharing ``tpmledger.sweep.id``)."""
    with read_session(url) as session:
        rows = session.execute(
            text(_RUNS_SQL + " WHERE r.sweep_id = :sweep_id ORDER BY r.concurrency_cap, r.run_id"),
            {"sweep_id": sweep_id},
        )
        return [_record(row) for row in rows]


def list_sweep_ids(url: str) -> list[str]:
    """Every sweep id some run declared, sorted."""
    with read_session(url) as session:
        rows = session.execute(
            text("SELECT DISTINCT sweep_id FROM runs WHERE sweep_id IS NOT NULL ORDER BY 1")
        )
        return [r[0] for r in rows]
