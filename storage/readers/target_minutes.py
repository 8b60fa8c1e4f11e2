"""Per target (provider, model) and minute: used versus quota (docs/metrics.md#quota-headroom).

One ``GROUP BY`` over a run's stored attempts (rollups excluded, as in every figure), so
its cost follows the attempts stored, never the minutes a run covers. For each target and
UTC minute of the attempts' end times:

- ``used_tpm`` = prompt + completion tokens, ``used_rpm`` = attempts;
- ``quota_tpm`` / ``quota_rpm`` = the newest value reported in the minute, a declared
  quota (``tpmledger.quota.*``) winning over a captured limit header;
- ``min_remaining_*`` = the lowest ``remaining`` header seen in the minute;
- ``rate_limited`` = attempts answered 429 (HTTP status, ``error.type`` 429, ``rate_limit…``
  or a ``RateLimitError``), and ``serving_failures`` = other failures that were 5xx,
  timeouts or cancellations (what the bottleneck verdict weighs): the classes of
  :mod:`tpmledger.error_classes`.

Also the count of rate-limit values that could not be read, per run. The headroom these
leave is analytics' rule (:mod:`analytics.kernels.quota_headroom`), not storage's.

Each sealed version stores its target-minutes beside it (``snapshot_diagnostics``, under
:data:`SEALED_TARGETS_KEY`); :func:`target_minutes` reads those and aggregates only the
attempts that end after the version's last minute (and of the sealed minutes that late
attempts changed since, as the minute table does), so a page or a request over a sealed or
checkpointed run never scans the attempts the version already covers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import psycopg
from psycopg import sql
from sqlalchemy import text
from sqlalchemy.orm import Session

from tpmledger.durations import MINUTE_NS
from tpmledger.error_classes import RATE_LIMITED_SQL, SERVING_PATTERNS, SERVING_SQL
from tpmledger.storage.readers.call_attempts import resolved_column, resolved_join
from tpmledger.storage.readers.live_read import run_state
from tpmledger.storage.readers.seal_scope import SealScope
from tpmledger.storage.schema.minute_keys import WHOLE_RUN
from tpmledger.storage.writers.sealed_figures_store import read_diagnostics

SEALED_TARGETS_KEY: Final = "quota_targets"
# Rate limited and serving failures as tpmledger/error_classes.py classifies them.
_LIMITED: Final = RATE_LIMITED_SQL
_SERVING: Final = SERVING_SQL


def _newest(column: str) -> str:
    # The value of the attempt that ended last (a tie: the larger value). max() over
    # [end_ns, value] arrays, not array_agg(... ORDER BY): an ordered aggregate makes
    # PostgreSQL sort every attempt of the run; this keeps one hash aggregate.
    return (
        f"(max(ARRAY[x.end_ns::numeric, {column}::numeric]) "
        f"FILTER (WHERE {column} IS NOT NULL))[2]::float8"
    )


# HTTP attempts read their call's target and tokens (storage/readers/call_attempts.py).
_PROMPT: Final = resolved_column("prompt_tokens", "x")
_COMPLETION: Final = resolved_column("completion_tokens", "x")
_PROVIDER: Final = resolved_column("provider", "x")
_MODEL: Final = resolved_column("model", "x")
_COUNTS: Final = f"""count(*), sum(coalesce({_PROMPT}, 0) + coalesce({_COMPLETION}, 0)),
       count(*) FILTER (WHERE {_LIMITED}), count(*) FILTER (WHERE {_SERVING} AND NOT {_LIMITED})"""
_GROUP: Final = f"x.run_id, {_PROVIDER}, {_MODEL}, x.end_ns / {MINUTE_NS}"
# One run per statement, named at every level (HTTP attempts' lookups too): on Citus the
# statement then goes whole to the worker holding the run.
_WHERE: Final = "x.run_id = %(run_id)s AND {scope} AND x.end_ns >= %(since_ns)s"

# Every attempt's figures, rollups included: one hash aggregate, which PostgreSQL plans
# well (an anti join on the rollups here makes it expect one row and sort every attempt).
_QUERY: Final = f"""
SELECT {_GROUP}, {_COUNTS},
       coalesce({_newest("x.quota_tpm_declared")}, {_newest("x.ratelimit_limit_tokens")}),
       coalesce({_newest("x.quota_rpm_declared")}, {_newest("x.ratelimit_limit_requests")}),
       min(x.ratelimit_remaining_tokens), min(x.ratelimit_remaining_requests),
       coalesce(sum(x.quota_values_ignored), 0)
FROM attempts x {{resolved}}
WHERE {_WHERE}
GROUP BY {_GROUP}
"""
# The rollups' counts, subtracted from the above (usually none): an attempt that another
# attempt of the run, in the same scope, names as its parent (docs/conventions.md#rollups).
_ROLLUPS: Final = f"""
SELECT {_GROUP}, {_COUNTS}
FROM attempts x {{resolved}}
WHERE {_WHERE} AND EXISTS (
    SELECT 1 FROM attempts c WHERE c.trace_id = x.trace_id AND c.parent_span_id = x.span_id
    AND c.run_id = %(run_id)s AND c.parent_span_id IS NOT NULL AND {{child_scope}})
GROUP BY {_GROUP}
"""


@dataclass(frozen=True)
class TargetMinute:
    """One target's figures in one minute of one run."""

    run_id: str
    provider: str | None
    model: str | None
    minute_ns: int
    used_tpm: int
    used_rpm: int
    rate_limited: int
    serving_failures: int
    quota_tpm: float | None
    quota_rpm: float | None
    min_remaining_tokens: float | None
    min_remaining_requests: float | None
    values_ignored: int


def fetch_target_minutes(
    conn: psycopg.Connection,
    run_ids: list[str],
    scope: SealScope | None = None,
    since_ns: int = 0,
) -> list[TargetMinute]:
    """Every (run, target, minute) of ``run_ids`` with attempts (within ``scope``: what a
    seal sees; ending at or after ``since_ns``), ordered by run, provider, model and
    minute. Counts leave rollups out; rate-limit values are read from every LLM span
    (a rollup reports its call's provider state too)."""
    scope = scope or SealScope()
    resolved = sql.SQL(resolved_join("x", "%(run_id)s", scope.received_by))
    query = sql.SQL(_QUERY).format(scope=scope.on("x"), resolved=resolved)
    rollups = sql.SQL(_ROLLUPS).format(
        scope=scope.on("x"), child_scope=scope.on("c"), resolved=resolved
    )
    found = []
    for run_id in dict.fromkeys(run_ids):
        params = {"since_ns": since_ns, "run_id": run_id, "serving": SERVING_PATTERNS}
        found += _run_targets(conn, query, rollups, params)
    return sorted(found, key=lambda t: (t.run_id, *_order(t)))


def _run_targets(
    conn: psycopg.Connection,
    query: sql.Composed,
    rollups: sql.Composed,
    params: dict[str, Any],
) -> list[TargetMinute]:
    """One run's target-minutes: every attempt's counts less the rollups'."""
    minus = {tuple(r[:4]): r[4:] for r in conn.execute(rollups, params).fetchall()}
    found = []
    for r in conn.execute(query, params).fetchall():
        attempts, tokens, limited, serving = (int(v) for v in r[4:8])
        less = minus.get(tuple(r[:4]))
        if less is not None:
            attempts, tokens, limited, serving = (
                a - int(b) for a, b in zip((attempts, tokens, limited, serving), less, strict=True)
            )
            if attempts == 0:
                continue  # only rollups ended here
        found.append(
            TargetMinute(
                run_id=str(r[0]),
                provider=r[1],
                model=r[2],
                minute_ns=int(r[3]) * MINUTE_NS,
                used_tpm=tokens,
                used_rpm=attempts,
                rate_limited=limited,
                serving_failures=serving,
                quota_tpm=r[8],
                quota_rpm=r[9],
                min_remaining_tokens=r[10],
                min_remaining_requests=r[11],
                values_ignored=int(r[12]),
            )
        )
    return found


_FIELDS: Final = (
    "provider", "model", "minute_ns", "used_tpm", "used_rpm", "rate_limited",
    "serving_failures", "quota_tpm", "quota_rpm", "min_remaining_tokens",
    "min_remaining_requests", "values_ignored",
)  # fmt: skip


def encode_target_minutes(targets: list[TargetMinute]) -> dict[str, Any]:
    """Target-minutes as stored beside a sealed version: column names and row lists."""
    return {"columns": list(_FIELDS), "rows": [[getattr(t, f) for f in _FIELDS] for t in targets]}


def decode_target_minutes(run_id: str, stored: dict[str, Any]) -> list[TargetMinute]:
    """The inverse of :func:`encode_target_minutes`."""
    columns = stored["columns"]
    return [
        TargetMinute(run_id=run_id, **dict(zip(columns, row, strict=True)))
        for row in stored["rows"]
    ]


def _order(t: TargetMinute) -> tuple[Any, ...]:
    # As the query orders them: provider, model (NULLs first), minute.
    return (t.provider is not None, t.provider or "", t.model is not None, t.model or "",
            t.minute_ns)  # fmt: skip


def _run_target_minutes(
    session: Session, conn: psycopg.Connection, run_id: str
) -> list[TargetMinute]:
    state = run_state(session, run_id)
    if state is None:
        return []
    sealed = None
    if state.snapshot_version is not None and state.snapshot_through is not None:
        row = read_diagnostics(session, run_id, state.snapshot_version)
        stored = (row.diagnostics or {}).get(SEALED_TARGETS_KEY) if row is not None else None
        if stored is not None:
            sealed = decode_target_minutes(run_id, stored)
    if sealed is None:  # never sealed, or sealed before target-minutes were stored
        return fetch_target_minutes(conn, [run_id])
    if not state.has_new_data:
        return sealed
    assert state.snapshot_through is not None
    after_ns = (int(state.snapshot_through.timestamp()) + 60) * 1_000_000_000
    # Sealed minutes that late attempts touched since: the minute table shows them from
    # their live rows (analytics.views.current_table), so they are read from the attempts
    # here too, or a checkpoint sealed while a minute was still filling would hold its
    # partial counts until the next version.
    redone = _relived_minutes(session, run_id, after_ns)
    since_ns = min(redone, default=after_ns)
    kept = [t for t in sealed if t.minute_ns not in redone]
    fresh = [
        t
        for t in fetch_target_minutes(conn, [run_id], since_ns=since_ns)
        if t.minute_ns >= after_ns or t.minute_ns in redone
    ]
    return sorted(kept + fresh, key=_order)


def _relived_minutes(session: Session, run_id: str, before_ns: int) -> set[int]:
    """Starts (ns) of the minutes before ``before_ns`` with a live whole-run row: minutes a
    version sealed that newer attempts have changed (the seal drops the live rows it
    covers)."""
    rows = session.execute(
        text(
            "SELECT DISTINCT (extract(epoch FROM minute_utc))::bigint FROM live_minutes "
            "WHERE run_id = :run AND shard_id = :whole AND minute_utc < to_timestamp(:before)"
        ),
        {"run": run_id, "whole": WHOLE_RUN, "before": before_ns // 1_000_000_000},
    )
    return {int(r[0]) * 1_000_000_000 for r in rows}


def target_minutes(session: Session, run_ids: list[str]) -> list[TargetMinute]:
    """Every (run, target, minute) of ``run_ids`` in ``session``'s transaction (one snapshot
    with the session's other reads): the newest version's stored target-minutes, plus the
    attempts that end after its last minute (every attempt when the run was never sealed).
    Sealed minutes that late attempts changed are read from the attempts, as the minute
    table takes them from their live rows."""
    driver = session.connection().connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    return [t for run_id in run_ids for t in _run_target_minutes(session, driver, run_id)]


def target_minutes_ending_from(
    session: Session, run_ids: list[str], since_ns: int
) -> list[TargetMinute]:
    """The runs' target-minutes from their raw attempts that end at or after ``since_ns``,
    in ``session``'s snapshot, one statement per run: what one recent minute costs,
    whatever the runs' sizes (the attempts are found through ``(run_id, end_ns)``)."""
    driver = session.connection().connection.driver_connection
    assert isinstance(driver, psycopg.Connection)
    return fetch_target_minutes(driver, run_ids, since_ns=since_ns)
