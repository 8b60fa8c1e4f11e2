"""Read-side queries over sealed snapshots and their minute tables (API, CLI, dashboard)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Select, func, select, text
from sqlalchemy.orm import Session

from tpmledger.storage.schema.minute_keys import WHOLE_RUN
from tpmledger.storage.schema.models import Snapshot
from tpmledger.storage.writers.minute_versions import MINUTE_ROW_COLUMNS, rows_as_of

_Query = TypeVar("_Query", bound=Select)

#: The longest wait a ``Retry-After`` can add to a run's quiet period (seconds): a run whose
#: clients were told to wait longer (a daily quota) counts as quiet once this has passed.
ANNOUNCED_WAIT_MAX_S = 300.0
#: Seconds a run's clients were told to wait beyond its newest stored attempt: the latest
#: end + ``Retry-After`` of its attempts (``runs.wait_until_ns``) past its last event end,
#: both on the spans' clock (docs/provenance.md#versions); ``r`` is the ``runs`` row.
ANNOUNCED_WAIT_SQL = (
    f"LEAST({ANNOUNCED_WAIT_MAX_S!r}, "
    "GREATEST(0, COALESCE(r.wait_until_ns - r.last_event_ns, 0)) / 1e9)::float8"
)
#: A run is quiet once no commit touched it for ``:quiet`` seconds after the wait it announced.
_QUIET = f"r.updated_at <= now() - make_interval(secs => :quiet + {ANNOUNCED_WAIT_SQL})"


def _newest(query: _Query, run_ids: Sequence[str]) -> _Query:
    """``query`` over snapshots, restricted to each run's newest version."""
    newest = (
        select(Snapshot.run_id, func.max(Snapshot.version).label("version"))
        .where(Snapshot.run_id.in_(run_ids))
        .group_by(Snapshot.run_id)
        .subquery()
    )
    return query.join(
        newest, (Snapshot.run_id == newest.c.run_id) & (Snapshot.version == newest.c.version)
    )


def latest_snapshot(session: Session, run_id: str) -> Snapshot | None:
    """The newest sealed snapshot of ``run_id`` (detached ORM row), or None."""
    return session.scalars(
        select(Snapshot).where(Snapshot.run_id == run_id).order_by(Snapshot.version.desc()).limit(1)
    ).first()


def snapshot_at(session: Session, run_id: str, version: int) -> Snapshot | None:
    """One version of ``run_id`` (detached ORM row), or None (also for a version no
    PostgreSQL ``integer`` holds: it names no version, and must not be a database error)."""
    if not -(2**31) <= version < 2**31:
        return None
    return session.get(Snapshot, (run_id, version))


def list_snapshots(session: Session, run_id: str) -> list[dict[str, Any]]:
    """Every version of ``run_id``, oldest first, without the metrics object."""
    rows = session.scalars(
        select(Snapshot).where(Snapshot.run_id == run_id).order_by(Snapshot.version)
    ).all()
    return [
        {
            "version": s.version,
            "seal": s.seal,
            "previous_seal": s.previous_seal,
            "computed_at": s.computed_at,
            "data_as_of": s.data_as_of,
            "events_sha256": s.events_sha256,
            "events_count": s.events_count,
            "merkle_root": s.merkle_root,
            "tree_size": s.tree_size,
            "metrics_sha256": s.metrics_sha256,
        }
        for s in rows
    ]


def minute_rows(
    session: Session, run_id: str, version: int, shard_id: str | None = WHOLE_RUN
) -> list[dict[str, Any]]:
    """Minute rows of one snapshot version, by shard then minute (all shards when None)."""
    where = "" if shard_id is None else " WHERE shard_id = :shard"
    query = text(
        f"SELECT {', '.join(MINUTE_ROW_COLUMNS)} FROM ({rows_as_of(':run_id', ':version')}) m"
        f"{where} ORDER BY shard_id, minute_utc"
    )
    rows = session.execute(query, {"run_id": run_id, "version": version, "shard": shard_id})
    return [dict(zip(MINUTE_ROW_COLUMNS, row, strict=True)) for row in rows]


def busy_minute_rows(
    session: Session, run_id: str, version: int, columns: Sequence[str]
) -> list[dict[str, Any]]:
    """The whole-run rows of one version's minutes that hold at least one attempt, by
    minute, with ``minute_utc`` and ``columns`` only (an empty minute's figures are
    constants: a reader that needs them makes them)."""
    wanted = ["minute_utc", *columns]
    query = text(
        f"SELECT {', '.join(wanted)} FROM ({rows_as_of(':run_id', ':version', wanted)}) m "
        "WHERE shard_id = :shard AND calls_in_minute > 0 ORDER BY minute_utc"
    )
    rows = session.execute(query, {"run_id": run_id, "version": version, "shard": WHOLE_RUN})
    return [dict(zip(wanted, row, strict=True)) for row in rows]


def runs_due_for_seal(session: Session, quiet_s: float) -> list[tuple[str, datetime]]:
    """Runs with data newer than their latest snapshot (or whose latest snapshot was sealed
    while they were still receiving data) and quiet for ``quiet_s`` seconds.

    Returns (run_id, updated_at), oldest activity first. "Quiet" means no ingest commit
    touched the run for ``quiet_s``, so a live run is not resealed on every batch; when its
    newest attempts told their clients to wait (``Retry-After``: a fleet waiting out a
    quota window sends nothing meanwhile), ``quiet_s`` counts from the end of that wait.
    """
    query = text(
        f"""
        SELECT r.run_id, r.updated_at
        FROM runs r
        LEFT JOIN LATERAL (
            SELECT s.data_as_of, s.final FROM snapshots s
            WHERE s.run_id = r.run_id ORDER BY s.version DESC LIMIT 1
        ) latest ON true
        WHERE (latest.data_as_of IS NULL OR r.updated_at > latest.data_as_of
               OR NOT latest.final)
          AND {_QUIET}
        ORDER BY r.updated_at
        """
    )
    return [(str(r[0]), r[1]) for r in session.execute(query, {"quiet": quiet_s})]


def runs_due_for_checkpoint(
    session: Session, every_s: float, quiet_s: float
) -> list[tuple[str, int, str | None]]:
    """Runs still receiving data (not quiet: :func:`runs_due_for_seal`) whose newest
    version is older than ``every_s``, or that have none and were first stored ``every_s``
    ago or more (a backfill's closed minutes are not sealed while its commits still
    arrive): (run_id, first event end ns, that version's through_minute_utc). Oldest
    checkpoint first."""
    query = text(
        f"""
        SELECT r.run_id, r.first_event_ns,
               latest.document -> 'minutes' ->> 'through_minute_utc'
        FROM runs r
        LEFT JOIN LATERAL (
            SELECT s.computed_at, s.document FROM snapshots s
            WHERE s.run_id = r.run_id ORDER BY s.version DESC LIMIT 1
        ) latest ON true
        WHERE NOT ({_QUIET})
          AND coalesce(latest.computed_at, r.created_at) <= now() - make_interval(secs => :every)
        ORDER BY latest.computed_at NULLS FIRST
        """
    )
    rows = session.execute(query, {"quiet": quiet_s, "every": every_s})
    return [(str(r[0]), int(r[1]), r[2]) for r in rows]
