"""Read-side queries over runs, shaped as the read API and the CLI print them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from storage.database import read_session
from storage.models import Run
from storage.snapshots_read import latest_seals


class UnknownRun(LookupError):
    """The run has no ``runs`` row (nothing was ever stored for it)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"unknown run {run_id!r}: no spans were stored for it")
        self.run_id = run_id


def ns_to_rfc3339(ns: int | None) -> str | None:
    """Nanoseconds since the epoch as RFC 3339 UTC with ``Z`` (SPEC §8)."""
    if ns is None:
        return None
    dt = datetime.fromtimestamp(ns // 1_000_000_000, tz=UTC).replace(
        microsecond=(ns % 1_000_000_000) // 1000
    )
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def list_runs(url: str) -> list[dict[str, Any]]:
    """Runs shaped as ``GET /v1/runs`` (SPEC §8), most recent activity first."""
    with read_session(url) as session:
        runs = session.scalars(select(Run).order_by(Run.last_event_ns.desc())).all()
    seals = latest_seals(url, [r.run_id for r in runs])
    return [
        {
            "run_id": r.run_id,
            "attempts": r.attempts,
            "shard_count": len(r.shard_ids),
            "first_event_utc": ns_to_rfc3339(r.first_event_ns),
            "last_event_utc": ns_to_rfc3339(r.last_event_ns),
            "latest_seal": seals.get(r.run_id),
        }
        for r in runs
    ]
