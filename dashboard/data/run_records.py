"""Runs joined with their latest sealed snapshot, and whether each run is live or sealed.

Reads through :mod:`tpmledger.storage.readers.run_listing_read` and the live minute table only
(never raw spans per request). A run is *live* when ingest stored data after its latest
snapshot was computed (``runs.updated_at > snapshots.data_as_of``, or no snapshot yet);
its figures then come from the live minute table over the snapshot's rows
(docs/dashboard.md#live-runs) and are provisional. Otherwise it is *sealed* and its
figures are the snapshot's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from tpmledger.storage.codecs.time_text import ns_to_rfc3339
from tpmledger.storage.readers.run_listing_read import run_row, run_rows, sweep_ids, sweep_run_rows


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
    final: bool = True
    # The last minute the version's tree holds (a checkpoint stops at the closed minutes).
    through_minute_utc: str | None = None
    # What late data changed since the previous version (docs/provenance.md#versions),
    # and the late attempts per minute ({minute_utc, late_attempts}, stored with it).
    rebased: dict[str, Any] | None = None
    late_minutes: list[dict[str, Any]] | None = None


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
    # The run object: the snapshot's, or for a live run the live figures (what minute rows
    # state exactly; the rest null until sealed). Empty before any figure exists.
    metrics: dict[str, Any]
    # The newest ingest commit the figures reflect (None: nothing computed yet).
    data_as_of: datetime | None = None
    # The newest snapshot covers every stored span (live only if it was sealed while
    # data was still arriving): its figures are shown.
    covered: bool = False

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
            final=bool(row.final),
            through_minute_utc=row.through_minute_utc,
            rebased=dict(row.rebased) if row.rebased else None,
            late_minutes=list(row.late_minutes) if row.late_minutes else None,
        )
    return RunRecord(
        run_id=row.run_id,
        status="archived" if row.archived_at else "live" if row.live else "sealed",
        covered=not row.uncovered,
        observed_shards=len(row.shard_ids or []),
        declared_shard_count=row.declared_shard_count,
        concurrency_cap=row.concurrency_cap,
        sweep_id=row.sweep_id,
        attempts=row.attempts,
        first_event_utc=ns_to_rfc3339(row.first_event_ns),
        last_event_utc=ns_to_rfc3339(row.last_event_ns),
        snapshot=snapshot,
        metrics=dict(row.metrics or {}),
        data_as_of=row.data_as_of,
    )


def with_live_figures(session: Session, run: RunRecord, close_after_s: float) -> RunRecord:
    """``run`` with the live figures in place of the snapshot's when spans arrived after it."""
    if not run.is_live or run.covered:
        return run
    from tpmledger.analytics.kernels.run_span_limit import RunTooLong
    from tpmledger.analytics.views.current_table import current_table
    from tpmledger.analytics.views.live_view import live_figures

    try:
        table = current_table(session, run.run_id, close_after_s=close_after_s)
    except RunTooLong:
        return replace(run, metrics={}, data_as_of=None)  # the run page says why
    if table is None or not table.minutes:
        return replace(run, metrics={}, data_as_of=None)
    return replace(run, metrics=live_figures(table), data_as_of=table.data_as_of)


def load_runs(session: Session, close_after_s: float = 120.0) -> list[RunRecord]:
    """Every run, most recent activity first (live runs with their live figures)."""
    records = [_record(row) for row in run_rows(session)]
    return [with_live_figures(session, r, close_after_s) for r in records]


def load_run(
    session: Session, run_id: str, close_after_s: float = 120.0, *, live_figures: bool = True
) -> RunRecord | None:
    """One run with its latest snapshot (live figures when live, unless ``live_figures``
    is False: the caller reads the live table itself), or ``None`` when ingest never saw
    it."""
    row = run_row(session, run_id)
    if row is None:
        return None
    record = _record(row)
    return with_live_figures(session, record, close_after_s) if live_figures else record


def load_sweep_runs(session: Session, sweep_id: str) -> list[RunRecord]:
    """The runs of one cap sweep (runs sharing ``tpmledger.sweep.id``)."""
    return [_record(row) for row in sweep_run_rows(session, sweep_id)]


def list_sweep_ids(session: Session) -> list[str]:
    """Every sweep id some run declared, sorted."""
    return sweep_ids(session)
