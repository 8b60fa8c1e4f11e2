"""Minute rows of sealed versions, each stored once: a version keeps only what changed.

A run is sealed many times (checkpoints every few minutes, then the final version), and
most minutes do not change between two versions. So a version stores the minute rows that
differ from the version before it (new minutes, and minutes whose figures changed); the
rows **of version V** are, for every (shard, minute), the newest row stored at a version
≤ V. Rows never disappear between versions (a version's minutes extend the previous
one's), so that reading is exact. Storage then grows with what changed, not with the
number of versions times the run's length (docs/provenance.md#versions).

A shard's rows are stored only for the minutes where it had attempts ending, in flight or
queued; its other minutes are empty (docs/metrics.md#minute-table) and readers make them
where they need a row per minute. Every reader of ``minute_metrics`` goes through
:func:`rows_as_of`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tpmledger.storage.schema.models import MinuteMetric

#: Minute row columns as the tables and the API publish them (no run_id / version).
MINUTE_ROW_COLUMNS: tuple[str, ...] = tuple(
    c.name for c in MinuteMetric.__table__.columns if c.name not in ("run_id", "version")
)
_KEY = ("shard_id", "minute_utc")


def rows_as_of(run: str, version: str, columns: Sequence[str] = MINUTE_ROW_COLUMNS) -> str:
    """SQL of the rows of a version: ``run`` and ``version`` are the placeholders (or SQL
    expressions) to use, e.g. ``":run_id"`` or ``"%(run)s"``. Use it as a subquery."""
    wanted = list(dict.fromkeys([*_KEY, *columns]))
    return (
        f"SELECT DISTINCT ON (shard_id, minute_utc) {', '.join(wanted)} FROM minute_metrics "
        f"WHERE run_id = {run} AND version <= {version} "
        "ORDER BY shard_id, minute_utc, version DESC"
    )


def changed_rows(
    previous: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The ``rows`` of a new version that the previous version's rows do not hold
    exactly (compared on every published column)."""
    before = {tuple(r[k] for k in _KEY): r for r in previous}
    changed = []
    for row in rows:
        old = before.get(tuple(row[k] for k in _KEY))
        if old is None or any(old[c] != row.get(c) for c in MINUTE_ROW_COLUMNS):
            changed.append(row)
    return changed
