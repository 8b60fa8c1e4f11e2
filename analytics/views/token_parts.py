"""Cache and reasoning tokens of a run and of its minutes (docs/metrics.md#token-parts).

They are parts of the prompt and completion tokens the minute table counts, kept beside
it as per-minute sums (``minute_extras``, written by the live updater for live and sealed
runs alike). A run's figure is the sum of its minutes' — the same sums ``/metrics``
publishes as ``tpmledger_run_tokens_total`` — and a type no attempt reported is ``None``
(not measured), never 0.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from tpmledger.storage.readers.run_metrics_read import (
    EXTRA_TOKEN_TYPES,
    extra_totals,
    minute_extra_tokens,
)
from tpmledger.storage.schema.minute_keys import WHOLE_RUN


def token_parts(sums: dict[str, int]) -> dict[str, int | None]:
    """``{cache_read, cache_write, reasoning}`` from sums by token type (None: not reported)."""
    return {token_type: sums.get(token_type) for token_type in EXTRA_TOKEN_TYPES}


def run_token_parts(session: Session, run_id: str) -> dict[str, int | None]:
    """The run's cache and reasoning tokens: the sums of its minutes'."""
    sums = extra_totals(session, [run_id]).get(run_id, {})
    return token_parts({key: value for (kind, key), value in sums.items() if kind == "tokens"})


def with_minute_token_parts(
    session: Session, run_id: str, shard_id: str, rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``rows`` (minutes in order) with ``tokens``: the minute's cache and reasoning tokens
    for the whole run; ``None`` for a shard's minutes (kept for the whole run only)."""
    if shard_id != WHOLE_RUN or not rows:
        return [{**row, "tokens": None} for row in rows]
    by_minute = minute_extra_tokens(session, run_id, rows[0]["minute_utc"], rows[-1]["minute_utc"])
    return [{**row, "tokens": token_parts(by_minute.get(row["minute_utc"], {}))} for row in rows]
