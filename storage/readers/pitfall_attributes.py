"""What a run's attempts declare for the diagnostics: deadlines, request timeouts, target caps.

These attributes are kept in the attempts' stored attribute JSON (span and resource), not
in columns; they are read once per seal (docs/metrics.md#diagnostics), never per request.
Only rows that carry one of the keys are returned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Final

import psycopg

DEADLINE_KEY: Final = "tpmledger.deadline_s"
REQUEST_TIMEOUT_KEY: Final = "tpmledger.request.timeout_s"
TARGET_CAP_KEY: Final = "tpmledger.target.concurrency.cap"
_KEYS: Final = [DEADLINE_KEY, REQUEST_TIMEOUT_KEY, TARGET_CAP_KEY]

_QUERY: Final = """
SELECT encode(trace_id, 'hex'), encode(span_id, 'hex'), provider, model,
       span_attributes ->> %(deadline)s,
       coalesce(span_attributes ->> %(timeout)s, resource_attributes ->> %(timeout)s),
       coalesce(span_attributes ->> %(cap)s, resource_attributes ->> %(cap)s)
FROM attempts
WHERE run_id = %(run_id)s AND (span_attributes ?| %(keys)s OR resource_attributes ?| %(keys)s)
"""

_TARGET_ATTEMPTS: Final = """
SELECT encode(trace_id, 'hex'), encode(span_id, 'hex'), provider, model
FROM attempts WHERE run_id = %s AND model = ANY(%s)
"""

AttemptKey = tuple[str, str]  # (trace_id hex, span_id hex)
Target = tuple[str | None, str | None]  # (provider, model)


def _seconds(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) and value > 0 else None


def _cap(text: Any) -> int | None:
    value = _seconds(text)
    return int(value) if value is not None and value == int(value) else None


@dataclass
class Declarations:
    """Per-attempt deadlines, the request timeouts declared, and per-target caps."""

    deadlines: dict[AttemptKey, float] = field(default_factory=dict)
    timeouts: dict[AttemptKey, float] = field(default_factory=dict)
    target_caps: dict[Target, int] = field(default_factory=dict)


def fetch_declarations(conn: psycopg.Connection, run_id: str) -> Declarations:
    """The run's declared deadlines, request timeouts and target caps (unreadable values,
    e.g. ``"soon"`` or a negative number, are ignored as not declared)."""
    found = Declarations()
    params = {
        "run_id": run_id,
        "keys": _KEYS,
        "deadline": DEADLINE_KEY,
        "timeout": REQUEST_TIMEOUT_KEY,
        "cap": TARGET_CAP_KEY,
    }
    for trace, span, provider, model, deadline, timeout, cap in conn.execute(_QUERY, params):
        key = (str(trace), str(span))
        if (value := _seconds(deadline)) is not None:
            found.deadlines[key] = value
        if (value := _seconds(timeout)) is not None:
            found.timeouts[key] = value
        if (limit := _cap(cap)) is not None:
            target = (provider, model)
            found.target_caps[target] = max(limit, found.target_caps.get(target, 0))
    return found


def fetch_target_attempts(
    conn: psycopg.Connection, run_id: str, models: list[str]
) -> list[tuple[str, str, str | None, str | None]]:
    """(trace hex, span hex, provider, model) of the run's attempts to ``models``."""
    rows = conn.execute(_TARGET_ATTEMPTS, (run_id, models)).fetchall()
    return [(str(t), str(s), p, m) for t, s, p, m in rows]
