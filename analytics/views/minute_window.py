"""The minutes a reader asks for (``GET /v1/runs/{run_id}/minutes``): the window, and one
shard's (or ``*``'s) rows over it, read from the newest snapshot when nothing is newer,
else from the current minute table (:mod:`analytics.views.current_table`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from tpmledger.analytics.kernels.run_span_limit import MAX_RUN_MINUTES
from tpmledger.analytics.views.current_table import MINUTE, current_table
from tpmledger.storage.readers.live_read import (
    RunState,
    run_state,
    sealed_minute_rows,
    sealed_minute_span,
    sealed_shard_row,
)
from tpmledger.storage.schema.minute_columns import EMPTY_FIGURES
from tpmledger.storage.schema.minute_keys import WHOLE_RUN
from tpmledger.storage.writers.minute_versions import MINUTE_ROW_COLUMNS


class UnknownShard(LookupError):
    """The run has no rows of the shard asked for."""


@dataclass(frozen=True)
class MinuteWindow:
    """The minutes a reader asks for (``GET /v1/runs/{run_id}/minutes?from=&to=&limit=``):
    from ``start`` to ``end`` (whole minutes, inclusive; None: the run's first / last),
    at most ``limit`` of them. Rows are made for these minutes only."""

    start: datetime | None = None
    end: datetime | None = None
    limit: int = MAX_RUN_MINUTES

    def minutes(self, first: datetime, last: datetime) -> list[datetime]:
        """The window's minutes within ``first`` .. ``last``, in order."""
        low = first if self.start is None else max(first, self.start)
        high = last if self.end is None else min(last, self.end)
        if low > high:
            return []
        count = min(self.limit, (high - low) // MINUTE + 1)
        return [low + i * MINUTE for i in range(count)]


def _filled(template: dict[str, Any], minute: datetime) -> dict[str, Any]:
    """The stored-row form of an empty minute of ``template``'s shard: counts and samples
    0, nothing measured, and the run's rules as the shard's stored rows show them (its
    cap, queue depth 0 or null, retries 0 or null)."""
    row: dict[str, Any] = dict.fromkeys(MINUTE_ROW_COLUMNS)
    row |= {k: v for k, v in EMPTY_FIGURES.items() if k in row}
    row |= {"shard_id": template["shard_id"], "minute_utc": minute}
    row["concurrency_cap"] = template["concurrency_cap"]
    if template["retries"] is None:
        row["retries"] = None
    if template["queue_depth_mean"] is None:
        row["queue_depth_mean"] = row["queue_depth_max"] = None
    return row


def _sealed_minutes(
    session: Session, state: RunState, shard_id: str, window: MinuteWindow
) -> list[dict[str, Any]]:
    """One shard's (or ``*``'s) rows of the newest snapshot over the window's minutes:
    the stored rows of those minutes, and a shard's empty minutes made on the way."""
    version = state.snapshot_version
    assert version is not None
    span = sealed_minute_span(session, state.run_id, version)
    template = (
        sealed_shard_row(session, state.run_id, version, shard_id)
        if shard_id != WHOLE_RUN
        else None
    )
    if shard_id != WHOLE_RUN and template is None:
        raise UnknownShard(shard_id)
    minutes = window.minutes(*span) if span is not None else []
    if not minutes:
        return []
    stored = sealed_minute_rows(session, state.run_id, version, shard_id, minutes[0], minutes[-1])
    if template is None:
        rows = stored
    else:
        by_minute = {row["minute_utc"]: row for row in stored}
        rows = [by_minute.get(m) or _filled(template, m) for m in minutes]
    return [{**row, "state": "sealed"} for row in rows]


def minutes_view(
    session: Session,
    run_id: str,
    shard_id: str = WHOLE_RUN,
    *,
    close_after_s: float = 120.0,
    window: MinuteWindow | None = None,
) -> list[dict[str, Any]] | None:
    """``GET /v1/runs/{run_id}/minutes``: rows of one shard (or ``*``) with ``state``, over
    the ``window``'s minutes (the whole run by default). None for an unknown run;
    :class:`UnknownShard` for a shard without rows.

    A run sealed with nothing newer reads that shard's sealed rows of those minutes only
    (the seal applied the table's rules already) and makes its empty minutes: the work
    follows the rows asked for, not every shard's.
    """
    state = run_state(session, run_id)
    if state is None:
        return None
    window = window or MinuteWindow()
    if not state.has_new_data and state.snapshot_version is not None:
        return _sealed_minutes(session, state, shard_id, window)
    table = current_table(session, run_id, close_after_s=close_after_s)
    if table is None:
        return None
    if shard_id != WHOLE_RUN and table.minutes and shard_id not in table.called:
        raise UnknownShard(shard_id)
    return table.shard_rows(shard_id, window)
