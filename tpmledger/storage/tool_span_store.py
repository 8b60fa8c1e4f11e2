"""Tool spans (``execute_tool``): the idempotent write and per-run reads.

Tool spans are evidence for the ``slot_held_by_tool`` diagnostic
(docs/metrics.md#diagnostics); they live in their own table and never count as attempts.
Ingest encodes a request's tool spans next to its attempts
(:mod:`storage.tool_span_encoding`, one COPY text block per request that
:class:`storage.attempt_encoding.AttemptBlock` carries), and the group commit stores both
in the same transaction, so "200 means committed" holds for tool spans too.
Re-sent spans are harmless: rows go through a staging table and
``INSERT … ON CONFLICT (trace_id, span_id) DO NOTHING``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Final, Protocol

import psycopg

from tpmledger.storage.tool_span_encoding import TOOL_SPAN_COPY_COLUMNS, encode_tool_spans

_COLUMNS: Final = ", ".join(TOOL_SPAN_COPY_COLUMNS)
_CREATE_STAGING: Final = (
    "CREATE TEMP TABLE IF NOT EXISTS tool_spans_staging "
    "(LIKE tool_spans INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
)
_MERGE: Final = (
    f"INSERT INTO tool_spans ({_COLUMNS}) SELECT {_COLUMNS} FROM tool_spans_staging "
    "ON CONFLICT (trace_id, span_id) DO NOTHING"
)


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
        cur.execute(_MERGE)
        stored = cur.rowcount
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
