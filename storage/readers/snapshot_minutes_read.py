"""Minute rows of one sealed version, as plotted: ``minute_metrics`` only, never raw spans.

Minutes come back as ``YYYY-MM-DD HH:MM`` text in UTC (what Plotly shows verbatim); the
columns asked for are checked against the table, since they are named in the SQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import text
from sqlalchemy.orm import Session

from tpmledger.storage.schema.minute_keys import WHOLE_RUN
from tpmledger.storage.schema.models import MinuteMetric
from tpmledger.storage.writers.minute_versions import rows_as_of

# Only real columns may be named in the generated SQL.
_ALLOWED_COLUMNS = frozenset(c.name for c in MinuteMetric.__table__.columns) - {
    "run_id",
    "version",
    "shard_id",
    "minute_utc",
}
_MINUTE_SQL = "to_char(minute_utc AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI') AS minute"


def _checked(columns: tuple[str, ...]) -> str:
    unknown = set(columns) - _ALLOWED_COLUMNS
    if unknown:
        raise ValueError(f"not minute_metrics columns: {sorted(unknown)}")
    return ", ".join(columns)


def whole_run_minute_rows(
    session: Session, run_id: str, version: int, columns: tuple[str, ...]
) -> Iterator[Any]:
    """``(minute, *columns)`` of the whole-run rows (``shard_id = '*'``), minute order."""
    sql = text(
        f"SELECT {_MINUTE_SQL}, {_checked(columns)} "
        f"FROM ({rows_as_of(':run_id', ':version', columns)}) m "
        "WHERE shard_id = :shard ORDER BY minute_utc"
    )
    yield from session.execute(sql, {"run_id": run_id, "version": version, "shard": WHOLE_RUN})


def shard_minute_rows(
    session: Session, run_id: str, version: int, columns: tuple[str, ...]
) -> Iterator[Any]:
    """``(shard_id, minute, *columns)`` of every shard's rows, by shard then minute."""
    sql = text(
        f"SELECT shard_id, {_MINUTE_SQL}, {_checked(columns)} "
        f"FROM ({rows_as_of(':run_id', ':version', columns)}) m "
        "WHERE shard_id <> :shard ORDER BY shard_id, minute_utc"
    )
    yield from session.execute(sql, {"run_id": run_id, "version": version, "shard": WHOLE_RUN})
