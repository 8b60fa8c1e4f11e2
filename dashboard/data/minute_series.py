"""Minute rows of one snapshot version, column-oriented for plotting.

Only ``minute_metrics`` is read (through :mod:`tpmledger.storage.readers.snapshot_minutes_read`):
a 1,000,000-attempt run over ~1,000 minutes and 8 shards is ~9,000 small rows, so
callbacks stay fast however many spans the run holds. Minutes come back as
``YYYY-MM-DD HH:MM`` strings in UTC, which Plotly shows verbatim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from tpmledger.storage.readers.snapshot_minutes_read import shard_minute_rows, whole_run_minute_rows
from tpmledger.storage.schema.minute_keys import WHOLE_RUN


@dataclass
class MinuteSeries:
    """Columns of one shard's (or the whole run's) minutes, in minute order."""

    minutes: list[str] = field(default_factory=list)
    columns: dict[str, list[Any]] = field(default_factory=dict)
    # Per minute, for live runs: "open" | "closed" | "sealed" (empty: all sealed).
    states: list[str] = field(default_factory=list)

    def column(self, name: str) -> list[Any]:
        return self.columns.get(name, [])

    def measured(self, name: str) -> bool:
        """True when at least one minute has a value (``null`` everywhere = not measured)."""
        return any(v is not None for v in self.column(name))


def load_run_minutes(
    session: Session, run_id: str, version: int, columns: tuple[str, ...]
) -> MinuteSeries:
    """The whole-run rows (``shard_id = '*'``) of one snapshot version."""
    series = MinuteSeries(columns={c: [] for c in columns})
    for row in whole_run_minute_rows(session, run_id, version, columns):
        series.minutes.append(row[0])
        for i, name in enumerate(columns, start=1):
            series.columns[name].append(row[i])
    return series


def load_shard_minutes(
    session: Session, run_id: str, version: int, columns: tuple[str, ...]
) -> dict[str, MinuteSeries]:
    """Per-shard rows of one snapshot version, keyed by shard id in natural order. A
    shard's minutes where nothing ended, ran or waited have no row (docs/metrics.md#minute-table):
    the stacked bars read a missing bar as 0, so they are not made here."""
    by_shard: dict[str, MinuteSeries] = {}
    for row in shard_minute_rows(session, run_id, version, columns):
        series = by_shard.get(row[0])
        if series is None:
            series = by_shard[row[0]] = MinuteSeries(columns={c: [] for c in columns})
        series.minutes.append(row[1])
        for i, name in enumerate(columns, start=2):
            series.columns[name].append(row[i])
    return {shard: by_shard[shard] for shard in sorted(by_shard, key=shard_sort_key)}


def shard_sort_key(shard_id: str) -> tuple[int, int, str]:
    """Numeric shard ids in numeric order ("2" before "10"), then the rest by name."""
    return (0, int(shard_id), "") if shard_id.isdigit() else (1, 0, shard_id)


def _plot_minute(minute: datetime) -> str:
    return minute.astimezone(UTC).strftime("%Y-%m-%d %H:%M")


def series_from_rows(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> MinuteSeries:
    """A series from current-table rows of one shard (live runs: analytics.views.current_table)."""
    series = MinuteSeries(columns={c: [] for c in columns})
    for row in rows:
        series.minutes.append(_plot_minute(row["minute_utc"]))
        series.states.append(row.get("state") or "sealed")
        for name in columns:
            series.columns[name].append(row[name])
    return series


def shard_series_from_rows(
    rows: list[dict[str, Any]], columns: tuple[str, ...]
) -> dict[str, MinuteSeries]:
    """Per-shard series (natural shard order) from current-table rows of every shard."""
    by_shard: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row["shard_id"] != WHOLE_RUN:
            by_shard.setdefault(row["shard_id"], []).append(row)
    return {
        shard: series_from_rows(by_shard[shard], columns)
        for shard in sorted(by_shard, key=shard_sort_key)
    }
