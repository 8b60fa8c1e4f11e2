"""Tool spans (``execute_tool``): the idempotent write and per-run reads.

Tool spans are evidence for the ``slot_held_by_tool`` diagnostic
(docs/metrics.md#diagnostics); they live in their own table and never count as attempts.
Ingest encodes a request's tool spans next to its attempts
(:mod:`storage.codecs.tool_span_encoding`, one COPY text block per request that
:class:`storage.codecs.attempt_encoding.AttemptBlock` carries), and the group commit stores both
in the same transaction, so "200 means committed" holds for tool spans too.
Re-sent spans are harmless: rows go through a staging table and
``INSERT … ON CONFLICT DO NOTHING``. New tool spans mark their
minutes in ``live_dirty`` with their commit's batch id, like attempts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final, Protocol

import psycopg

from tpmledger.durations import MINUTE_NS
from tpmledger.storage.codecs.tool_span_encoding import TOOL_SPAN_COPY_COLUMNS, encode_tool_spans

_COLUMNS: Final = ", ".join(TOOL_SPAN_COPY_COLUMNS)
_CREATE_STAGING: Final = (
    "CREATE TEMP TABLE IF NOT EXISTS tool_spans_staging "
    "(LIKE tool_spans INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
)
# The commit's batch id (storage/writers/bulk_writer.py sets one for its attempts after this): a
# tool span changes the held time of attempts already counted live, so it is stored with
# a batch id and marks the minutes it spans for the live updater (docs/metrics.md#diagnostics).
_BATCH: Final = (
    "SELECT coalesce(nullif(current_setting('tpmledger.ingest_batch', true), ''), "
    "set_config('tpmledger.ingest_batch', nextval('ingest_batches')::text, true))"
)
_MERGE: Final = f"""
WITH inserted AS (
    INSERT INTO tool_spans ({_COLUMNS}) SELECT {_COLUMNS} FROM tool_spans_staging
    ON CONFLICT DO NOTHING
    RETURNING run_id, start_ns, end_ns, ingest_batch
), marked AS (
    INSERT INTO live_dirty (run_id, end_minute_ns, from_minute_ns, batch_id)
    SELECT run_id, end_ns / {MINUTE_NS} * {MINUTE_NS}, min(start_ns) / {MINUTE_NS} * {MINUTE_NS},
           ingest_batch
    FROM inserted GROUP BY run_id, end_ns / {MINUTE_NS}, ingest_batch
)
SELECT count(*) FROM inserted
"""


class ToolBlockCarrier(Protocol):
    """Anything holding encoded tool spans (an ingest request's attempt block)."""

    tools: bytes
    tool_rows: int


def write_tool_blocks(conn: psycopg.Connection, blocks: Sequence[ToolBlockCarrier]) -> int:
    """Store the tool spans of ``blocks`` inside the caller's transaction; returns how many
    were new."""
    carrying = [block for block in blocks if block.tool_rows]
    if not carrying:
        return 0
    with conn.cursor() as cur:
        cur.execute(_CREATE_STAGING)
        with cur.copy(f"COPY tool_spans_staging ({_COLUMNS}) FROM STDIN") as copy:
            for block in carrying:
                copy.write(block.tools)
        cur.execute(_BATCH)
        cur.execute(_MERGE)
        row = cur.fetchone()
        stored = int(row[0]) if row else 0
        cur.execute("TRUNCATE tool_spans_staging")
    return max(stored, 0)


def write_tool_spans(conn: psycopg.Connection, rows: Iterable[Sequence[Any]]) -> int:
    """Store tool span rows (tuples in column order) idempotently; returns how many were new."""

    class _Block:
        def __init__(self) -> None:
            self.tools, self.tool_rows = encode_tool_spans(rows)

    return write_tool_blocks(conn, [_Block()])


def fetch_run_tool_intervals(conn: psycopg.Connection, run_id: str) -> list[tuple[str, int, int]]:
    """(trace_id hex, start_ns, end_ns) of every tool span stored for ``run_id``."""
    rows = conn.execute(
        "SELECT encode(trace_id, 'hex'), start_ns, end_ns FROM tool_spans WHERE run_id = %s",
        (run_id,),
    ).fetchall()
    return [(str(t), int(s), int(e)) for t, s, e in rows]


def run_has_tool_spans(conn: psycopg.Connection, run_id: str) -> bool:
    """Whether any tool span is stored for ``run_id`` (one index probe)."""
    row = conn.execute(
        "SELECT EXISTS (SELECT 1 FROM tool_spans WHERE run_id = %s)", (run_id,)
    ).fetchone()
    return bool(row and row[0])


def fetch_trace_tools(
    conn: psycopg.Connection, run_id: str, trace_ids: Sequence[str]
) -> list[tuple[str, int, int, int | None]]:
    """(trace_id hex, start_ns, end_ns, ingest_batch) of the run's tool spans in the given
    traces (hex), one primary-key range lookup per trace."""
    if not trace_ids:
        return []
    rows = conn.execute(
        """
        SELECT encode(t.trace_id, 'hex'), t.start_ns, t.end_ns, t.ingest_batch
        FROM unnest(%s::text[]) AS u(trace_hex)
        CROSS JOIN LATERAL (
            SELECT * FROM tool_spans x
            WHERE x.trace_id = decode(u.trace_hex, 'hex') AND x.run_id = %s
        ) t
        """,
        (sorted(set(trace_ids)), run_id),
    ).fetchall()
    return [(str(t), int(s), int(e), None if b is None else int(b)) for t, s, e, b in rows]


def fetch_new_tools(
    conn: psycopg.Connection, run_id: str, batches: Sequence[int]
) -> list[tuple[str, int, int]]:
    """(trace_id hex, start_ns, end_ns) of the run's tool spans stored by these ingest
    commits (found through the block-range index on ``ingest_batch``)."""
    if not batches:
        return []
    rows = conn.execute(
        """
        WITH new AS MATERIALIZED (
            SELECT * FROM tool_spans
            WHERE ingest_batch BETWEEN %(first)s AND %(last)s
              AND ingest_batch = ANY(%(batches)s::bigint[])
        )
        SELECT encode(trace_id, 'hex'), start_ns, end_ns FROM new WHERE run_id = %(run)s
        """,
        {"first": min(batches), "last": max(batches), "batches": list(batches), "run": run_id},
    ).fetchall()
    return [(str(t), int(s), int(e)) for t, s, e in rows]


def count_tools_by_start_minute(
    conn: psycopg.Connection, run_id: str, low_ns: int, high_ns: int
) -> dict[int, int]:
    """Tool spans of the run per start minute (ns), starting in ``[low_ns, high_ns)``."""
    rows = conn.execute(
        f"""
        SELECT start_ns / {MINUTE_NS} * {MINUTE_NS}, count(*) FROM tool_spans
        WHERE run_id = %s AND start_ns >= %s AND start_ns < %s GROUP BY 1
        """,
        (run_id, low_ns, high_ns),
    ).fetchall()
    return {int(m): int(n) for m, n in rows}


def tool_dependents(
    conn: psycopg.Connection, run_id: str, tools: Sequence[tuple[str, int, int]]
) -> list[tuple[str, str, int, int]]:
    """(trace hex, span hex, start_ns, end_ns) of the run's attempts of the same trace
    whose slot overlaps one of ``tools`` (their tool-held time changed)."""
    if not tools:
        return []
    rows = conn.execute(
        """
        SELECT DISTINCT encode(a.trace_id, 'hex'), encode(a.span_id, 'hex'), a.start_ns, a.end_ns
        FROM unnest(%s::text[], %s::bigint[], %s::bigint[]) AS t(trace_hex, lo, hi)
        JOIN attempts a ON a.trace_id = decode(t.trace_hex, 'hex')
        WHERE a.run_id = %s AND a.start_ns < t.hi AND a.end_ns > t.lo
        """,
        ([t[0] for t in tools], [t[1] for t in tools], [t[2] for t in tools], run_id),
    ).fetchall()
    return [(str(t), str(s), int(lo), int(hi)) for t, s, lo, hi in rows]
