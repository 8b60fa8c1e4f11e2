"""Read-side queries of the live minute table and the snapshot rows it overlays.

A run's current minute table is its newest snapshot's rows, with every minute that has
live rows taken from ``live_minutes`` instead (docs/metrics.md#live-figures). These
queries return plain dicts; :mod:`analytics.views.current_table` applies the run-level rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from tpmledger.durations import MINUTE_NS
from tpmledger.storage.schema.minute_keys import WHOLE_RUN
from tpmledger.storage.schema.models import LiveMinute, LiveRunMinute
from tpmledger.storage.writers.minute_versions import MINUTE_ROW_COLUMNS, rows_as_of

_MINUTE_COLUMNS = MINUTE_ROW_COLUMNS
_LIVE_COLUMNS = tuple(c.name for c in LiveMinute.__table__.columns if c.name != "run_id")


@dataclass(frozen=True)
class RunState:
    """What decides whether a run is live, and its bookkeeping facts."""

    run_id: str
    first_event_ns: int
    last_event_ns: int
    updated_at: datetime
    shard_ids: list[str]
    declared_shard_count: int | None
    concurrency_cap: int | None
    sweep_id: str | None
    attempts: int
    snapshot_version: int | None
    snapshot_seal: str | None
    snapshot_data_as_of: datetime | None
    snapshot_final: bool | None
    snapshot_metrics: dict[str, Any] | None
    live_rows: int  # live rows newer than the snapshot
    # The last minute the newest snapshot covers (its document's through_minute_utc);
    # a checkpoint covers closed minutes only. None for versions sealed before checkpoints.
    snapshot_through: datetime | None = None
    # Set once ``tpmledger prune`` archived the run and deleted its raw spans.
    archived_at: datetime | None = None
    archive_dir: str | None = None

    @property
    def snapshot_covers_every_minute(self) -> bool:
        """The newest snapshot covers the run's last minute (it is not a checkpoint of
        closed minutes only)."""
        if self.snapshot_through is None:
            return True
        last = datetime.fromtimestamp(self.last_event_ns // MINUTE_NS * 60, UTC)
        return self.snapshot_through >= last

    @property
    def has_new_data(self) -> bool:
        """Data arrived after the newest snapshot was computed (or it was never sealed), or
        that snapshot is a checkpoint that leaves out the open minutes."""
        return (
            self.snapshot_data_as_of is None
            or self.updated_at > self.snapshot_data_as_of
            or not self.snapshot_covers_every_minute
        )

    @property
    def is_live(self) -> bool:
        """Still receiving data: data newer than the newest snapshot, or that snapshot was
        sealed while data was arriving (``tpmledger analyze`` of a running run)."""
        return self.has_new_data or self.snapshot_final is False


_STATE_SQL = """
SELECT r.run_id, r.first_event_ns, r.last_event_ns, r.updated_at, r.shard_ids,
       r.archived_at, r.archive_dir,
       r.declared_shard_count, r.concurrency_cap, r.sweep_id, r.attempts,
       s.version, s.seal, s.data_as_of, s.final, s.metrics,
       s.document -> 'minutes' ->> 'through_minute_utc' AS through_minute_utc,
       (SELECT count(*) FROM live_minutes l WHERE l.run_id = r.run_id) AS live_rows
FROM runs r
LEFT JOIN LATERAL (
    SELECT version, seal, data_as_of, final, metrics, document FROM snapshots sn
    WHERE sn.run_id = r.run_id ORDER BY sn.version DESC LIMIT 1
) s ON true
"""


def _state(row: Any) -> RunState:
    return RunState(
        run_id=row.run_id,
        first_event_ns=row.first_event_ns,
        last_event_ns=row.last_event_ns,
        updated_at=row.updated_at,
        shard_ids=list(row.shard_ids or []),
        declared_shard_count=row.declared_shard_count,
        concurrency_cap=row.concurrency_cap,
        sweep_id=row.sweep_id,
        attempts=row.attempts,
        snapshot_version=row.version,
        snapshot_seal=row.seal,
        snapshot_data_as_of=row.data_as_of,
        snapshot_final=row.final,
        snapshot_metrics=dict(row.metrics) if row.metrics is not None else None,
        live_rows=row.live_rows,
        snapshot_through=_minute(row.through_minute_utc),
        archived_at=row.archived_at,
        archive_dir=row.archive_dir,
    )


def _minute(text_value: str | None) -> datetime | None:
    if not text_value:
        return None
    return datetime.fromisoformat(text_value.replace("Z", "+00:00"))


def run_state(session: Session, run_id: str) -> RunState | None:
    """One run's state, or None when ingest never stored a span of it."""
    row = session.execute(
        text(_STATE_SQL + " WHERE r.run_id = :run_id"), {"run_id": run_id}
    ).first()
    return _state(row) if row is not None else None


def run_states(session: Session, run_ids: list[str] | None = None) -> list[RunState]:
    """States of ``run_ids`` (every run when None), most recent activity first."""
    where = " WHERE r.run_id = ANY(:ids)" if run_ids is not None else ""
    query = text(_STATE_SQL + where + " ORDER BY r.last_event_ns DESC, r.run_id")
    rows = session.execute(query, {"ids": run_ids} if run_ids is not None else {})
    return [_state(row) for row in rows]


def sealed_minute_rows(
    session: Session,
    run_id: str,
    version: int,
    shard_id: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
) -> list[dict[str, Any]]:
    """Every stored row (all shards and '*') of one snapshot version, or one shard's only,
    of the minutes from ``start`` to ``end`` (inclusive; None: unbounded). A shard's
    minutes without a row are empty (docs/metrics.md#minute-table)."""
    where = ["TRUE"]
    if shard_id is not None:
        where.append("shard_id = :shard")
    if start is not None:
        where.append("minute_utc >= :start")
    if end is not None:
        where.append("minute_utc <= :end")
    query = text(
        f"SELECT {', '.join(_MINUTE_COLUMNS)} FROM ({rows_as_of(':run_id', ':version')}) m"
        f" WHERE {' AND '.join(where)} ORDER BY shard_id, minute_utc"
    )
    params = {"run_id": run_id, "version": version, "shard": shard_id, "start": start, "end": end}
    rows = session.execute(query, params)
    return [dict(zip(_MINUTE_COLUMNS, row, strict=True)) for row in rows]


def sealed_minute_span(
    session: Session, run_id: str, version: int
) -> tuple[datetime, datetime] | None:
    """First and last minute of a version's minute table (its whole-run rows: a version's
    minutes only ever extend the versions' before it), or None when it has none."""
    row = session.execute(
        text(
            "SELECT min(minute_utc), max(minute_utc) FROM minute_metrics "
            "WHERE run_id = :run_id AND version <= :version AND shard_id = :whole"
        ),
        {"run_id": run_id, "version": version, "whole": WHOLE_RUN},
    ).one()
    return (row[0], row[1]) if row[0] is not None else None


def sealed_shard_row(
    session: Session, run_id: str, version: int, shard_id: str
) -> dict[str, Any] | None:
    """One stored row of a shard in a version (what its empty minutes are made like:
    its cap, whether it reports queue waits, whether the run measures retries), or None
    when the version has no row of that shard."""
    query = text(
        f"SELECT {', '.join(_MINUTE_COLUMNS)} FROM ({rows_as_of(':run_id', ':version')}) m"
        " WHERE shard_id = :shard ORDER BY minute_utc DESC LIMIT 1"
    )
    row = session.execute(query, {"run_id": run_id, "version": version, "shard": shard_id}).first()
    return dict(zip(_MINUTE_COLUMNS, row, strict=True)) if row is not None else None


def live_minute_rows(session: Session, run_id: str) -> list[dict[str, Any]]:
    """Every live row of the run."""
    query = text(
        f"SELECT {', '.join(_LIVE_COLUMNS)} FROM live_minutes "
        "WHERE run_id = :run_id ORDER BY shard_id, minute_utc"
    )
    rows = session.execute(query, {"run_id": run_id})
    return [dict(zip(_LIVE_COLUMNS, row, strict=True)) for row in rows]


_RUN_MINUTE_COLUMNS = tuple(c.name for c in LiveRunMinute.__table__.columns if c.name != "run_id")


def live_run_minute_rows(session: Session, run_id: str) -> list[dict[str, Any]]:
    """Every per-minute run fact of the run (storage.schema.models.LiveRunMinute), by minute."""
    query = text(
        f"SELECT {', '.join(_RUN_MINUTE_COLUMNS)} FROM live_run_minutes "
        "WHERE run_id = :run_id ORDER BY minute_utc"
    )
    rows = session.execute(query, {"run_id": run_id})
    return [dict(zip(_RUN_MINUTE_COLUMNS, row, strict=True)) for row in rows]


def run_states_in_window(session: Session, since_ns: int) -> list[RunState]:
    """States of the runs ``/metrics`` reports (docs/operations.md#per-run-series): every
    live run and every run whose last event ended at or after ``since_ns``."""
    # A superset in SQL (the conditions of RunState.is_live), exact in Python.
    where = f""" WHERE r.last_event_ns >= :since OR s.version IS NULL
        OR r.updated_at > s.data_as_of OR s.final IS NOT TRUE
        OR (s.document -> 'minutes' ->> 'through_minute_utc')::timestamptz
           < to_timestamp((r.last_event_ns / {MINUTE_NS}) * 60)"""
    rows = session.execute(text(_STATE_SQL + where + " ORDER BY r.run_id"), {"since": since_ns})
    states = [_state(row) for row in rows]
    return [s for s in states if s.is_live or s.last_event_ns >= since_ns]
