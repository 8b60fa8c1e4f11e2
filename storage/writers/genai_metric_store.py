"""GenAI token-usage metrics: add an export's points, read a run's total.

A delta point adds its value. A cumulative point adds the difference from the last value
of its stream *and start time* (nothing when it repeats, so a re-sent export adds
nothing); a new start time means the stream restarted, and its whole value is added.
Each start time of a stream keeps its own last value: a delayed re-send of an export
from before a restart finds its own start's value and adds nothing (issue 41: 100 from
start s1, 10 from s2, a late retry of the first, 20 from s2 stored 230, not 120). Each
export is one transaction (docs/ingest.md#other-signals). Delta points sent twice are
counted twice: OTLP gives them no identity to recognise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Protocol

from sqlalchemy import text
from sqlalchemy.orm import Session

from tpmledger.storage.server.database import transaction


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


def _started(stream: str, start_ns: int) -> str:
    """The stored key of one start of a stream (``genai_metric_streams.stream``)."""
    return f"{stream}@{start_ns}"


def _last_value(session: Session, stream: str, start_ns: int) -> float | None:
    """The last value stored for this start of the stream; rows stored before streams
    were keyed by start time (the bare stream hash) count when their start matches."""
    for key in (_started(stream, start_ns), stream):
        row = session.execute(_LAST, {"s": key}).first()
        if row is not None and int(row[0]) == start_ns:
            return float(row[1])
    return None


# The time is taken in VALUES: Citus refuses a function that is not IMMUTABLE (now())
# in DO UPDATE SET of a distributed table, and evaluates one in VALUES on the coordinator.
_KEEP = text(
    "INSERT INTO genai_metric_streams (stream, start_ns, value, updated_at) "
    "VALUES (:s, :start, :v, now()) ON CONFLICT (stream) DO UPDATE SET "
    "start_ns = EXCLUDED.start_ns, value = EXCLUDED.value, updated_at = EXCLUDED.updated_at"
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
                last = _last_value(session, point.stream, point.start_ns)
                if last is not None:
                    if point.value <= last:
                        continue  # a repeat, or an older export arriving late
                    delta = point.value - last
                key = _started(point.stream, point.start_ns)
                session.execute(_KEEP, {"s": key, "start": point.start_ns, "v": point.value})
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
    """All tokens the run's GenAI metrics counted (input + output: cache and reasoning
    tokens are parts of those), or ``None`` when none were received.

    Ingest refuses non-finite and negative points; rows stored before it did (or written
    by other means) are left out here rather than breaking the run's pages: a NaN or an
    infinity is not a count. ``None`` too if what is left does not sum to a finite number.
    """
    found = session.execute(
        text(
            "SELECT sum(tokens) FROM genai_metric_tokens "
            "WHERE run_id = :run AND token_type IN ('input', 'output') "
            "AND tokens >= 0 AND tokens < 'Infinity'::float8"
        ),
        {"run": run_id},
    ).scalar_one()
    return float(found) if found is not None and math.isfinite(found) else None
