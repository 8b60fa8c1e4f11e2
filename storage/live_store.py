"""Reads and writes of the live minute table's path (docs/metrics.md#live-figures).

Ingest appends the minutes each commit touched to ``live_dirty``; the analytics worker
takes a run's marks, reads the attempts of the touched minutes (never the whole run),
and replaces those minutes' rows in ``live_minutes``. Everything here runs on the
caller's connection, inside the one transaction that :func:`live_transaction` opens:
the marks are deleted, the attempts read and the rows written atomically, so a failed
update leaves the marks for the next try.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl
import psycopg
from psycopg import sql
from sqlalchemy import text
from sqlalchemy.orm import Session

from storage.attempt_frames import copy_select
from storage.binary_copy import Kind
from storage.database import raw_transaction
from storage.models import LiveMinute

MINUTE_NS = 60_000_000_000

#: Columns of a live window frame: what the minute figures need (ids in hex for the
#: flag cache), nothing more: a busy minute is re-read on every update.
LIVE_WINDOW_KINDS: dict[str, Kind] = {
    "trace_id": "hex",
    "span_id": "hex",
    "shard_id": "text",
    "status": "text",
    "start_ns": "integer",
    "end_ns": "integer",
    "queue_wait_s": "float",
    "ttft_s": "float",
    "prompt_tokens": "integer",
    "completion_tokens": "integer",
    "resend_count": "integer",
    "concurrency_cap": "integer",
    "call_id_explicit": "integer",
}

_COLUMNS = """trace_id, span_id, shard_id, status, start_ns, end_ns, queue_wait_s, ttft_s,
       prompt_tokens, completion_tokens, resend_count, concurrency_cap, call_id_explicit::int"""
_WINDOW_SQL = f"""
SELECT {_COLUMNS}
FROM attempts
WHERE run_id = {{run_id}} AND end_ns >= {{low}} AND end_ns < {{high}}
"""
# New commits' rows: found through the block-range index on ingest_batch alone (the
# materialized step keeps the planner from scanning the whole window instead).
_NEW_ROWS_SQL = f"""
WITH new AS MATERIALIZED (
    SELECT * FROM attempts
    WHERE ingest_batch BETWEEN {{first}} AND {{last}}
      AND ingest_batch = ANY({{batches}}::bigint[])
)
SELECT {_COLUMNS}
FROM new
WHERE run_id = {{run_id}} AND end_ns >= {{low}} AND end_ns < {{high}}
"""

# A span is a rollup when a stored LLM span of its run names it as parent (rollups are
# left out of every figure); an attempt without a resend count is a retry when an earlier
# non-rollup attempt of its explicit call exists (docs/metrics.md#retries). Both probes
# use the partial indexes of migration 0003, for the attempts given only.
_IS_PARENT = """EXISTS (SELECT 1 FROM attempts c WHERE c.trace_id = {t}.trace_id
                   AND c.parent_span_id = {t}.span_id AND c.run_id = {t}.run_id)"""
_PROBE_SQL = f"""
SELECT encode(a.trace_id, 'hex'), encode(a.span_id, 'hex'),
       ({_IS_PARENT.format(t="a")})::int,
       (a.resend_count IS NULL AND a.call_id_explicit AND EXISTS (
            SELECT 1 FROM attempts b
            WHERE b.run_id = a.run_id AND b.call_id_explicit AND b.call_id = a.call_id
              AND (b.start_ns, b.end_ns, b.span_id) < (a.start_ns, a.end_ns, a.span_id)
              AND NOT {_IS_PARENT.format(t="b")}))::int
{{source}}
"""
# The attempts the probes and dependents start from: given ids (one primary-key lookup
# each, never a scan), or every attempt ending in a range (a worker's first read of a
# busy minute: one set-based pass instead of hundreds of thousands of lookups).
_BY_IDS = """FROM generate_series(0, %(count)s - 1) AS g(i)
CROSS JOIN LATERAL (
    SELECT substring(%(ids)s::bytea FROM g.i * 24 + 1 FOR 16) AS trace_id,
           substring(%(ids)s::bytea FROM g.i * 24 + 17 FOR 8) AS span_id
) u
CROSS JOIN LATERAL (
    SELECT x.trace_id, x.span_id, x.parent_span_id, x.run_id, x.call_id, x.call_id_explicit,
           x.resend_count, x.start_ns, x.end_ns
    FROM attempts x
    WHERE x.trace_id = u.trace_id AND x.span_id = u.span_id AND x.run_id = %(run_id)s
    LIMIT 1
) a"""
_BY_RANGE = """FROM attempts a
WHERE a.run_id = %(run_id)s AND a.end_ns >= %(low)s AND a.end_ns < %(high)s"""

# What the given (new) attempts change elsewhere: their parents become rollups (kind 1),
# and later attempts of the same explicit call without a resend count move in the call
# (kind 2); a parent that is itself an explicit call's attempt moves its call's others
# (kind 3: the order among non-rollups changed).
_DEPENDENTS_SQL = """
WITH given AS (
    SELECT a.trace_id, a.span_id, a.parent_span_id, a.run_id, a.call_id, a.call_id_explicit,
           a.start_ns, a.end_ns
    {source}
), parents AS (
    SELECT DISTINCT p.trace_id, p.span_id, p.run_id, p.call_id, p.call_id_explicit,
           p.start_ns, p.end_ns, p.queue_wait_s
    FROM given g
    CROSS JOIN LATERAL (  -- LATERAL: one index lookup per attempt, never a hash join
        SELECT x.* FROM attempts x
        WHERE x.trace_id = g.trace_id AND x.span_id = g.parent_span_id AND x.run_id = g.run_id
        OFFSET 0
    ) p
    WHERE g.parent_span_id IS NOT NULL
)
SELECT 1, encode(p.trace_id, 'hex'), encode(p.span_id, 'hex'), p.start_ns, p.end_ns,
       p.queue_wait_s
FROM parents p
UNION ALL
SELECT 2, encode(o.trace_id, 'hex'), encode(o.span_id, 'hex'), o.end_ns, o.end_ns, NULL
FROM given g
CROSS JOIN LATERAL (
    SELECT x.trace_id, x.span_id, x.end_ns FROM attempts x
    WHERE x.run_id = g.run_id AND x.call_id_explicit AND x.call_id = g.call_id
      AND x.resend_count IS NULL
      AND (x.start_ns, x.end_ns, x.span_id) > (g.start_ns, g.end_ns, g.span_id)
    OFFSET 0  -- keeps the planner from turning the lookups into a scan of the table
) o
WHERE g.call_id_explicit
UNION ALL
SELECT 3, encode(o.trace_id, 'hex'), encode(o.span_id, 'hex'), o.end_ns, o.end_ns, NULL
FROM parents p
CROSS JOIN LATERAL (
    SELECT x.trace_id, x.span_id, x.end_ns FROM attempts x
    WHERE x.run_id = p.run_id AND x.call_id_explicit AND x.call_id = p.call_id
      AND x.resend_count IS NULL
    OFFSET 0
) o
WHERE p.call_id_explicit
"""


@dataclass(frozen=True)
class Dependent:
    """An attempt whose derived flags a new attempt changed, and its interval."""

    trace_id: str  # hex
    span_id: str  # hex
    began_ns: int  # queued (or admitted) time: the interval whose minutes to recompute
    end_ns: int
    becomes_rollup: bool


@dataclass(frozen=True)
class LiveRunFacts:
    """The ``runs`` row facts the live path needs, read in the update's transaction."""

    run_id: str
    updated_at: datetime
    first_event_ns: int
    last_event_ns: int
    max_slot_ns: int


@contextmanager
def live_transaction(url: str) -> Iterator[psycopg.Connection]:
    """One REPEATABLE READ transaction (commit on exit, rollback on error)."""
    with raw_transaction(url) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield conn


def summarize_new_batches(url: str) -> None:
    """Summarize the block ranges filled since the last call, so looking up new commits'
    rows reads only their pages (an unsummarized range is read whole on every lookup;
    autovacuum would summarize them, but not soon enough under a steady ingest)."""
    with raw_transaction(url) as conn:
        conn.execute("SELECT brin_summarize_new_values('ix_attempts_ingest_batch')")


def dirty_run_ids(url: str) -> list[str]:
    """Runs with queued marks, in id order."""
    with raw_transaction(url) as conn:
        rows = conn.execute("SELECT DISTINCT run_id FROM live_dirty ORDER BY run_id").fetchall()
    return [str(r[0]) for r in rows]


@dataclass(frozen=True)
class Mark:
    """Attempts ending in ``end_minute_ns``, intervals from ``from_minute_ns``, stored by
    ingest commit ``batch_id`` (None: written before batches were recorded)."""

    end_minute_ns: int
    from_minute_ns: int
    batch_id: int | None


def take_marks(conn: psycopg.Connection, run_id: str) -> tuple[list[Mark], int]:
    """Delete the run's queued marks; returns them and the run's update generation (one
    more than the previous update's, unless someone else drained marks meanwhile)."""
    rows = conn.execute(
        "DELETE FROM live_dirty WHERE run_id = %s "
        "RETURNING end_minute_ns, from_minute_ns, batch_id",
        (run_id,),
    ).fetchall()
    generation = conn.execute(
        "INSERT INTO live_state AS s (run_id, generation) VALUES (%s, 1) "
        "ON CONFLICT (run_id) DO UPDATE SET generation = s.generation + 1 "
        "RETURNING generation",
        (run_id,),
    ).fetchone()
    marks = [Mark(int(end), int(start), batch) for end, start, batch in rows]
    return marks, int(generation[0]) if generation else 0


def live_run_facts(conn: psycopg.Connection, run_id: str) -> LiveRunFacts | None:
    row = conn.execute(
        "SELECT run_id, updated_at, first_event_ns, last_event_ns, coalesce(max_slot_ns, 0) "
        "FROM runs WHERE run_id = %s",
        (run_id,),
    ).fetchone()
    return LiveRunFacts(*row) if row else None


def fetch_window(
    conn: psycopg.Connection,
    run_id: str,
    low_ns: int,
    high_ns: int,
    batches: Sequence[int] | None = None,
) -> pl.DataFrame:
    """Attempts of ``run_id`` ending in [low_ns, high_ns) (ids as lowercase hex); with
    ``batches``, only those stored by these ingest commits."""
    bounds = {
        "run_id": sql.Literal(run_id),
        "low": sql.Literal(low_ns),
        "high": sql.Literal(high_ns),
    }
    if batches is None:
        query = sql.SQL(_WINDOW_SQL).format(**bounds)
    else:
        query = sql.SQL(_NEW_ROWS_SQL).format(
            first=sql.Literal(min(batches, default=0)),
            last=sql.Literal(max(batches, default=0)),
            batches=sql.Literal(list(batches)),
            **bounds,
        )
    if batches is None:
        frame = copy_select(conn, query, LIVE_WINDOW_KINDS)
    else:
        # Statistics taken while the column was mostly NULL (rows loaded before batches
        # were recorded) make the planner prefer a full scan over the block-range index.
        conn.execute("SET LOCAL enable_seqscan = off")
        try:
            frame = copy_select(conn, query, LIVE_WINDOW_KINDS)
        finally:
            conn.execute("SET LOCAL enable_seqscan = on")
    return frame.with_columns(run_id=pl.lit(run_id, dtype=pl.String))


#: Above this many attempts the probes work on a range of end times instead of ids.
RANGE_PROBE_MIN = 20_000


def _source(
    trace_ids: Sequence[str], span_ids: Sequence[str], end_range: tuple[int, int] | None
) -> tuple[str, dict[str, Any]]:
    """The probes' starting attempts: the ids, or (many ids) every attempt ending in
    ``end_range``, which holds them; rows beyond the ids are harmless extra work."""
    if end_range is not None and len(trace_ids) >= RANGE_PROBE_MIN:
        return _BY_RANGE, {"low": end_range[0], "high": end_range[1]}
    # One bytea of (trace_id 16 bytes, span_id 8 bytes) pairs: an array parameter of
    # thousands of ids cost more to encode than the lookups themselves.
    ids = bytes.fromhex("".join(t + s for t, s in zip(trace_ids, span_ids, strict=True)))
    return _BY_IDS, {"ids": ids, "count": len(trace_ids)}


def probe_flags(
    conn: psycopg.Connection,
    run_id: str,
    trace_ids: Sequence[str],
    span_ids: Sequence[str],
    end_range: tuple[int, int] | None = None,
) -> pl.DataFrame:
    """``rollup`` and ``later_in_call`` (0/1) of the given attempts (hex ids); attempts
    ending in ``end_range`` may come back too."""
    schema = {
        "trace_id": pl.String,
        "span_id": pl.String,
        "rollup": pl.Int64,
        "later_in_call": pl.Int64,
    }
    if not trace_ids:
        return pl.DataFrame(schema=schema)
    source, params = _source(trace_ids, span_ids, end_range)
    rows = conn.execute(
        _PROBE_SQL.replace("{source}", source), {"run_id": run_id, **params}
    ).fetchall()
    return pl.DataFrame(rows, schema=schema, orient="row")


def dependents(
    conn: psycopg.Connection,
    run_id: str,
    trace_ids: Sequence[str],
    span_ids: Sequence[str],
    end_range: tuple[int, int] | None = None,
) -> list[Dependent]:
    """Attempts whose flags the given (new) attempts changed (see ``_DEPENDENTS_SQL``)."""
    if not trace_ids:
        return []
    source, params = _source(trace_ids, span_ids, end_range)
    rows = conn.execute(
        _DEPENDENTS_SQL.replace("{source}", source), {"run_id": run_id, **params}
    ).fetchall()
    out = []
    for kind, trace_id, span_id, start_ns, end_ns, wait_s in rows:
        waited = round(min(float(wait_s), 3e9) * 1e9) if wait_s and wait_s > 0 else 0
        out.append(Dependent(trace_id, span_id, int(start_ns) - waited, int(end_ns), kind == 1))
    return out


def known_caps(conn: psycopg.Connection, run_id: str) -> dict[str, int]:
    """Each shard's cap as the run's live rows and newest snapshot recorded it."""
    rows = conn.execute(
        """
        SELECT shard_id, max(concurrency_cap) FROM (
            SELECT shard_id, concurrency_cap FROM live_minutes WHERE run_id = %(run)s
            UNION ALL
            SELECT m.shard_id, m.concurrency_cap FROM minute_metrics m
            WHERE m.run_id = %(run)s AND m.version = (
                SELECT max(version) FROM snapshots WHERE run_id = %(run)s)
        ) caps
        WHERE shard_id <> '*' AND concurrency_cap IS NOT NULL
        GROUP BY shard_id
        """,
        {"run": run_id},
    ).fetchall()
    return {str(shard): int(cap) for shard, cap in rows}


def mark_stale_caps(conn: psycopg.Connection, run_id: str, caps: dict[str, int]) -> int:
    """Queue again the minutes whose work-conserving seconds were counted against an
    older cap of their shard (a larger cap was declared since); returns how many."""
    if not caps:
        return 0
    shards, values = list(caps), [caps[s] for s in caps]
    cursor = conn.execute(
        """
        INSERT INTO live_dirty (run_id, end_minute_ns, from_minute_ns)
        SELECT DISTINCT l.run_id, m.ns, m.ns
        FROM live_minutes l
        JOIN unnest(%s::text[], %s::int[]) AS c(shard_id, cap) ON c.shard_id = l.shard_id
        CROSS JOIN LATERAL (
            SELECT (extract(epoch FROM l.minute_utc)::bigint * 1000000000) AS ns) m
        WHERE l.run_id = %s AND l.queue_seconds > 0 AND l.sag_cap IS DISTINCT FROM c.cap
        """,
        (shards, values, run_id),
    )
    return cursor.rowcount


_LIVE_COLUMNS: tuple[str, ...] = tuple(c.name for c in LiveMinute.__table__.columns)


def replace_minutes(
    conn: psycopg.Connection,
    run_id: str,
    minute_starts: Sequence[datetime],
    rows: Sequence[dict[str, Any]],
) -> None:
    """Replace every live row of ``minute_starts`` with ``rows`` (one COPY)."""
    conn.execute(
        "DELETE FROM live_minutes WHERE run_id = %s AND minute_utc = ANY(%s)",
        (run_id, list(minute_starts)),
    )
    if not rows:
        return
    statement = sql.SQL("COPY live_minutes ({}) FROM STDIN").format(
        sql.SQL(", ").join(sql.Identifier(c) for c in _LIVE_COLUMNS)
    )
    with conn.cursor() as cursor, cursor.copy(statement) as copy:
        for row in rows:
            copy.write_row([row.get(c) for c in _LIVE_COLUMNS])


def drop_sealed_live_rows(
    session: Session, run_id: str, data_as_of: datetime, minutes: tuple[datetime, datetime] | None
) -> None:
    """Delete the live rows a new snapshot covers: computed from data it also saw, for
    minutes it has rows of (``minutes`` = its first and last minute). Rows of other
    minutes (activity before the first call ended) stay: the snapshot has none of them.
    Runs in the sealing transaction."""
    if minutes is None:
        return
    session.execute(
        text(
            "DELETE FROM live_minutes WHERE run_id = :run AND data_as_of <= :as_of "
            "AND minute_utc BETWEEN :first AND :last"
        ),
        {"run": run_id, "as_of": data_as_of, "first": minutes[0], "last": minutes[1]},
    )
