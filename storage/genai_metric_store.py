"""GenAI token-usage metrics: add an export's points, read a run's total.

A delta point adds its value. A cumulative point adds the difference from the last value
of its stream (nothing when it repeats, so a re-sent export adds nothing); a new start
time means the stream restarted, and its whole value is added. Each export is one
transaction (docs/ingest.md#other-signals). Delta points sent twice are counted twice:
OTLP gives them no identity to recognise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Protocol

from sqlalchemy import text
from sqlalchemy.orm import Session

from tpmledger.storage.database import transaction


class TokenPointLike(Protocol):
    """One token-usage point (``ingest.genai_metrics.TokenPoint``)."""

    @property
    def run_id(self) -> str: ...
    @property
    def shard_id(self) -> str: ...
    @property
    def minute_ns(self) -> int: ...
    @property
    def token_type(self) -> str: ...
    @property
    def value(self) -> float: ...
    @property
    def cumulative(self) -> bool: ...
    @property
    def stream(self) -> str: ...
    @property
    def start_ns(self) -> int: ...


_LAST = text("SELECT start_ns, value FROM genai_metric_streams WHERE stream = :s FOR UPDATE")
_KEEP = text(
    "INSERT INTO genai_metric_streams (stream, start_ns, value) VALUES (:s, :start, :v) "
    "ON CONFLICT (stream) DO UPDATE SET start_ns = :start, value = :v, updated_at = now()"
)
_ADD = text(
    "INSERT INTO genai_metric_tokens (run_id, shard_id, minute_utc, token_type, tokens) "
    "VALUES (:run, :shard, :minute, :type, :tokens) "
    "ON CONFLICT (run_id, shard_id, minute_utc, token_type) "
    "DO UPDATE SET tokens = genai_metric_tokens.tokens + EXCLUDED.tokens"
)


def add_token_points(url: str, points: Sequence[TokenPointLike]) -> int:
    """Store one export's points; returns how many added tokens (a repeat adds none)."""
    added = 0
    with transaction(url) as session:
        for point in sorted(points, key=lambda p: (p.stream, p.start_ns, p.value)):
            delta = point.value
            if point.cumulative:
                last = session.execute(_LAST, {"s": point.stream}).first()
                if last is not None and int(last[0]) == point.start_ns:
                    if point.value <= float(last[1]):
                        continue  # a repeat, or an older export arriving late
                    delta = point.value - float(last[1])
                session.execute(
                    _KEEP, {"s": point.stream, "start": point.start_ns, "v": point.value}
                )
            if delta <= 0:
                continue
            minute = datetime.fromtimestamp(point.minute_ns // 1_000_000_000, UTC)
            session.execute(
                _ADD,
                {
                    "run": point.run_id,
                    "shard": point.shard_id,
                    "minute": minute,
                    "type": point.token_type,
                    "tokens": delta,
                },
            )
            added += 1
    return added


def metric_tokens(session: Session, run_id: str) -> float | None:
    """All tokens the run's GenAI metrics counted, or ``None`` when none were received.

    Ingest refuses non-finite and negative points; rows stored before it did (or written
    by other means) are left out here rather than breaking the run's pages: a NaN or an
    infinity is not a count. ``None`` too if what is left does not sum to a finite number.
    """
    found = session.execute(
        text(
            "SELECT sum(tokens) FROM genai_metric_tokens "
            "WHERE run_id = :run AND tokens >= 0 AND tokens < 'Infinity'::float8"
        ),
        {"run": run_id},
    ).scalar_one()
    return float(found) if found is not None and math.isfinite(found) else None
