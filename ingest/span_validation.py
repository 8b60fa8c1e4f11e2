"""Validation of LLM-call spans (docs/conventions.md, "Invalid spans").

An invalid span is rejected with a human-readable reason and reported through OTLP
partial success; the rest of its request is stored. Each check returns ``None`` when the
span passes, else the reason. Reasons are fixed strings (plus the offending attribute
key) so a request with many bad spans yields few distinct reasons.

Decisions the contract leaves open, documented in ``docs/conventions.md``:
- a token count may arrive as an OTLP int, or as a double with an integral value
  (JavaScript SDKs and OTLP/JSON encoders send some integers as doubles); strings,
  booleans, fractional doubles and anything outside [0, 10^9] are rejected;
- ``parent_span_id`` may be empty (a root span) or 8 bytes; all zeros counts as empty;
- both start and end must lie in [2000-01-01T00:00:00Z, now + 1 day];
- a span may last at most ``TPMLEDGER_MAX_SPAN_DURATION_S`` (default 24 h), and its
  queue wait (``tpmledger.queue.wait_s`` / vLLM's time in queue) at most as long: no
  figure's cost may grow with one span's length (docs/ingest.md#limits).
"""

from __future__ import annotations

import os
from typing import Any, Final

from tpmledger.ingest import conventions as conv

MAX_TOKENS: Final = 1_000_000_000
# 2000-01-01T00:00:00Z in Unix nanoseconds.
MIN_TIMESTAMP_NS: Final = 946_684_800 * 1_000_000_000
FUTURE_SLACK_NS: Final = 86_400 * 1_000_000_000
# Read at import: the normalizer worker processes inherit the environment.
MAX_DURATION_S: Final = float(os.environ.get("TPMLEDGER_MAX_SPAN_DURATION_S") or 86_400)
MAX_DURATION_NS: Final = int(MAX_DURATION_S * 1_000_000_000)

_ZERO_TRACE_ID: Final = bytes(16)
_ZERO_SPAN_ID: Final = bytes(8)

REASON_TRACE_ID: Final = "trace_id must be 16 bytes and not all zero"
REASON_SPAN_ID: Final = "span_id must be 8 bytes and not all zero"
REASON_PARENT_SPAN_ID: Final = "parent_span_id must be empty or 8 bytes"
REASON_END_BEFORE_START: Final = "span end time is before its start time"
REASON_TIME_RANGE: Final = "span timestamps must lie between 2000-01-01 and now + 1 day"
# Run, shard, sweep and call ids are index keys: PostgreSQL refuses an index row over ~8 kB,
# which failed the whole COPY (every span of the request) before this limit.
MAX_ID_CHARS: Final = 512
REASON_ID_LENGTH: Final = (
    f"run, shard, sweep or call id longer than {MAX_ID_CHARS} characters or holding a NUL character"
)
REASON_DURATION: Final = (
    f"span lasts longer than {MAX_DURATION_S:g} s (TPMLEDGER_MAX_SPAN_DURATION_S)"
)
REASON_QUEUE_WAIT: Final = (
    f"queue wait is longer than {MAX_DURATION_S:g} s (TPMLEDGER_MAX_SPAN_DURATION_S)"
)


def check_ids(trace_id: bytes, span_id: bytes, parent_span_id: bytes) -> str | None:
    """Reason the span's ids are invalid, or ``None``."""
    if len(trace_id) != 16 or trace_id == _ZERO_TRACE_ID:
        return REASON_TRACE_ID
    if len(span_id) != 8 or span_id == _ZERO_SPAN_ID:
        return REASON_SPAN_ID
    if parent_span_id and len(parent_span_id) != 8:
        return REASON_PARENT_SPAN_ID
    return None


def check_times(start_ns: int, end_ns: int, latest_ns: int) -> str | None:
    """Reason the span's times are invalid, or ``None``; ``latest_ns`` = now + 1 day."""
    if end_ns < start_ns:
        return REASON_END_BEFORE_START
    if start_ns < MIN_TIMESTAMP_NS or end_ns > latest_ns:
        return REASON_TIME_RANGE
    if end_ns - start_ns > MAX_DURATION_NS:
        return REASON_DURATION
    return None


ID_FIELDS: Final = ("run_id", "shard_id", "sweep_id", "call_id")
#: Attributes whose values become run, shard, sweep or call ids (docs/conventions.md).
ID_KEYS: Final = frozenset(
    key for field in ID_FIELDS for family in conv.FAMILIES for key in family.keys.get(field, ())
)


def nul_in_ids(values: dict[str, Any]) -> bool:
    """True when an attribute that names a run, shard, sweep or call holds a NUL character
    (checked before NULs are stripped from the other attributes)."""
    return any(isinstance(values.get(key), str) and "\x00" in values[key] for key in ID_KEYS)


REASON_WHOLE_RUN_SHARD: Final = "shard id '*' names the whole run in tpmledger's tables"


def check_id_lengths(*ids: str | None) -> str | None:
    """Reason one of the ids is too long (or holds a NUL byte), or ``None``."""
    for value in ids:
        if value is not None and (len(value) > MAX_ID_CHARS or "\x00" in value):
            return REASON_ID_LENGTH
    return None


def check_queue_wait(wait_s: float | None) -> str | None:
    """Reason a queue wait is too long, or ``None`` (negative or non-numeric waits were
    already read as absent)."""
    if wait_s is None:
        return None
    if not 0.0 <= wait_s <= MAX_DURATION_S:  # NaN fails too
        return REASON_QUEUE_WAIT
    return None


def latest_timestamp_ns(now_ns: int) -> int:
    """The newest acceptable span timestamp for a request received at ``now_ns``."""
    return now_ns + FUTURE_SLACK_NS


def token_count(value: Any) -> int | None:
    """The token count ``value`` holds, or ``None`` when it is not an integer in [0, 10^9]."""
    if type(value) is int:
        return value if 0 <= value <= MAX_TOKENS else None
    if type(value) is float and value.is_integer() and 0.0 <= value <= MAX_TOKENS:
        return int(value)
    return None


def token_reason(key: str) -> str:
    """The rejection reason for a bad token count under ``key``."""
    return f"token count {key} is not an integer in [0, 10^9]"
