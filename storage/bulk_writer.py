"""The bulk write path: COPY into a staging table, then one idempotent INSERT.

Rows arrive as tuples in :data:`storage.models.ATTEMPT_COPY_COLUMNS` order. A re-sent
span (same ``trace_id``, ``span_id``) is dropped by ``ON CONFLICT DO NOTHING``; the
``runs`` table is updated only with the rows that were actually inserted, so a
re-send changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg

from storage.models import ATTEMPT_COPY_COLUMNS

_COLUMNS = ", ".join(ATTEMPT_COPY_COLUMNS)

_CREATE_STAGING = (
    "CREATE TEMP TABLE IF NOT EXISTS attempts_staging "
    "(LIKE attempts INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
)

_MERGE = f"""
WITH inserted AS (
    INSERT INTO attempts ({_COLUMNS})
    SELECT {_COLUMNS} FROM attempts_staging
    ON CONFLICT (trace_id, span_id) DO NOTHING
    RETURNING run_id, shard_id, end_ns, declared_shard_count, concurrency_cap, sweep_id
), per_run AS (
    INSERT INTO runs AS r (run_id, first_event_ns, last_event_ns, shard_ids,
                           declared_shard_count, concurrency_cap, sweep_id, attempts,
                           updated_at)
    SELECT run_id, min(end_ns), max(end_ns), array_agg(DISTINCT shard_id ORDER BY shard_id),
           max(declared_shard_count), max(concurrency_cap), max(sweep_id), count(*),
           clock_timestamp()
    FROM inserted GROUP BY run_id ORDER BY run_id
    ON CONFLICT (run_id) DO UPDATE SET
        first_event_ns = LEAST(r.first_event_ns, excluded.first_event_ns),
        last_event_ns = GREATEST(r.last_event_ns, excluded.last_event_ns),
        shard_ids = ARRAY(SELECT DISTINCT s FROM unnest(r.shard_ids || excluded.shard_ids) s
                          ORDER BY s),
        declared_shard_count = COALESCE(excluded.declared_shard_count, r.declared_shard_count),
        concurrency_cap = COALESCE(excluded.concurrency_cap, r.concurrency_cap),
        sweep_id = COALESCE(excluded.sweep_id, r.sweep_id),
        attempts = r.attempts + excluded.attempts,
        updated_at = excluded.updated_at
    RETURNING 1
)
SELECT (SELECT count(*) FROM inserted), (SELECT count(*) FROM per_run)
"""


def copy_rows(conn: psycopg.Connection, table: str, rows: Iterable[Sequence[Any]]) -> None:
    """COPY rows (in ATTEMPT_COPY_COLUMNS order) into ``table``; used by the benchmark too."""
    with conn.cursor() as cur, cur.copy(f"COPY {table} ({_COLUMNS}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def write_attempts(conn: psycopg.Connection, rows: Iterable[Sequence[Any]]) -> int:
    """Store attempt rows idempotently inside the caller's transaction.

    Returns how many rows were new. Must run inside :func:`storage.database.in_transaction`
    or :func:`storage.database.raw_transaction`.
    """
    with conn.cursor() as cur:
        cur.execute(_CREATE_STAGING)
    copy_rows(conn, "attempts_staging", rows)
    with conn.cursor() as cur:
        cur.execute(_MERGE)
        result = cur.fetchone()
        cur.execute("TRUNCATE attempts_staging")
    return int(result[0]) if result else 0
