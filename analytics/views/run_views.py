"""The run object and minute series as the read API serves them (docs/api.md).

Sealed runs are served from their newest snapshot; runs with data newer than it (or
never sealed) from the live minute table over the snapshot's rows
(:mod:`analytics.views.current_table`, :mod:`analytics.views.live_view`), marked
``"live": true`` with ``data_as_of``. No request reads raw spans or computes figures from
them: this runs in the ingest process.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from tpmledger.analytics.views.live_view import run_view
from tpmledger.analytics.views.minute_window import MinuteWindow, UnknownShard, minutes_view
from tpmledger.analytics.views.run_extras import (
    live_run_diagnostics,
    reconciliation,
    run_extras,
)
from tpmledger.analytics.views.token_parts import run_token_parts, with_minute_token_parts
from tpmledger.storage.codecs.time_text import minute_text, ns_to_rfc3339, utc_ms_or_none
from tpmledger.storage.readers.attempt_sources import LLM_SPANS_RETRY_REASON, attempts_source
from tpmledger.storage.readers.live_read import run_state, run_states
from tpmledger.storage.readers.runs_read import UnknownRun
from tpmledger.storage.schema.minute_columns import SERVED_FIGURES
from tpmledger.storage.schema.minute_keys import WHOLE_RUN

# Keys of one element of GET /v1/runs/{run_id}/minutes, in the documented order: the
# declared minute columns the API serves (storage/schema/minute_columns.py), state, tokens.
API_MINUTE_KEYS: tuple[str, ...] = ("minute_utc", "state", *SERVED_FIGURES, "tokens")


def _api_minute(row: dict[str, Any]) -> dict[str, Any]:
    out = {key: row.get(key) for key in API_MINUTE_KEYS}
    out["minute_utc"] = minute_text(row["minute_utc"])
    return out


def run_object(
    session: Session, run_id: str, close_after_s: float = 120.0, slo_text: str | None = None
) -> dict[str, Any]:
    """The run object (plus extra keys); raises :class:`UnknownRun` for an unknown run.

    ``diagnostics`` and goodput under ``slo_text`` come from the rows sealed with the
    version shown (analytics/views/run_extras.py); a live run's diagnostics are all
    live, over its closed minutes (docs/metrics.md#diagnostics).
    """
    view = run_view(session, run_id, close_after_s=close_after_s)
    if view is None:
        raise UnknownRun(run_id)
    extras = run_extras(session, run_id, view.get("snapshot_version"), slo_text)
    if isinstance(view.get("diagnostics"), dict):  # a live run's, over its closed minutes
        version = view.get("latest_sealed_version")
        extras["diagnostics"] = live_run_diagnostics(view["diagnostics"], version)
    source = attempts_source(session, run_id)
    # How attempts were counted (docs/metrics.md#attempts-source); the reason is null
    # unless retries are not measured because only LLM spans were seen.
    hidden = view.get("retry_rate") is None and source == "llm_spans"
    counted = {
        "attempts_source": source,
        "retry_rate_not_measured_because": LLM_SPANS_RETRY_REASON if hidden else None,
    }
    reconciled = reconciliation(session, run_id, view.get("tokens"))
    if isinstance(view.get("tokens"), dict):  # cache and reasoning tokens beside prompt/completion
        view = {**view, "tokens": {**view["tokens"], **run_token_parts(session, run_id)}}
    return {**view, **extras, **counted, "reconciliation": reconciled}


def minute_series(
    session: Session,
    run_id: str,
    shard_id: str = WHOLE_RUN,
    close_after_s: float = 120.0,
    window: MinuteWindow | None = None,
) -> list[dict[str, Any]] | None:
    """Minutes of the whole run ('*') or one shard with their ``state``, over ``window``
    (the whole run by default); None when that shard has no rows (or, without a window,
    the run has no minutes). Raises :class:`UnknownRun` for an unknown run."""
    try:
        rows = minutes_view(session, run_id, shard_id, close_after_s=close_after_s, window=window)
    except UnknownShard:
        return None
    if rows is None:
        raise UnknownRun(run_id)
    if not rows and window is None and not _stored_not_yet_live(session, run_id):
        return None
    return [_api_minute(r) for r in with_minute_token_parts(session, run_id, shard_id, rows)]


def _stored_not_yet_live(session: Session, run_id: str) -> bool:
    """The run has spans stored that no live update took in yet (its minutes come with
    the next one: an empty series, not an unknown run)."""
    state = run_state(session, run_id)
    return state is not None and state.attempts > 0 and state.has_new_data


def run_list(session: Session) -> list[dict[str, Any]]:
    """``GET /v1/runs``: every run, most recent activity first, live or sealed."""
    return [
        {
            "run_id": s.run_id,
            "attempts": s.attempts,
            "shard_count": len(s.shard_ids),
            "first_event_utc": ns_to_rfc3339(s.first_event_ns),
            "last_event_utc": ns_to_rfc3339(s.last_event_ns),
            "latest_seal": s.snapshot_seal,
            "status": "archived" if s.archived_at else "live" if s.is_live else "sealed",
            "data_as_of": utc_ms_or_none(s.updated_at if s.has_new_data else s.snapshot_data_as_of),
        }
        for s in run_states(session)
    ]
