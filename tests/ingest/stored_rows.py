"""Reading back what ingest stored, for the ingest tests."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from tpmledger.storage.server.database import libpq_url

_COLUMNS = (
    "span_id, trace_id, run_id, shard_id, declared_shard_count, prompt_tokens, "
    "completion_tokens, status, error_type, convention, start_ns, end_ns"
)


def stored_attempts(url: str) -> dict[str, dict[str, Any]]:
    """Every stored attempt keyed by its hex span id."""
    with psycopg.connect(libpq_url(url), row_factory=dict_row) as conn:
        rows = conn.execute(f"SELECT {_COLUMNS} FROM attempts").fetchall()
    return {bytes(r["span_id"]).hex(): r for r in rows}


def stored_count(url: str) -> int:
    """How many attempts are stored."""
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute("SELECT count(*) FROM attempts").fetchone()
    return int(row[0]) if row else 0


def run_attempts(url: str, run_id: str) -> int | None:
    """``runs.attempts`` of one run (None if the run is unknown)."""
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute("SELECT attempts FROM runs WHERE run_id = %s", (run_id,)).fetchone()
    return int(row[0]) if row else None
