"""The bulk write path: COPY rows into ``attempts``, idempotent on (trace_id, span_id).

Rows arrive as tuples in :data:`storage.models.ATTEMPT_COPY_COLUMNS` order.

Re-sent spans are rare (an exporter retrying after a lost answer), so the common case is
optimistic: COPY straight into ``attempts`` inside a savepoint. If any row is already
stored (or repeated in the batch) the savepoint rolls back and the batch takes the slow
path: COPY into a staging table and ``INSERT … ON CONFLICT DO NOTHING``. Either way the
``runs`` table is updated only with rows that were actually inserted, so a re-send
changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from psycopg import errors

from storage.models import ATTEMPT_COPY_COLUMNS

_COLUMNS = ", ".join(ATTEMPT_COPY_COLUMNS)
_RUN_ID, _SHARD_ID, _DECLARED, _CAP, _SWEEP, _END_NS = (
    ATTEMPT_COPY_COLUMNS.index(name)
    for name in (
        "run_id",
        "shard_id",
        "declared_shard_count",
        "concurrency_cap",
        "sweep_id",
        "end_ns",
    )
)

_CREATE_STAGING = (
    "CREATE TEMP TABLE IF NOT EXISTS attempts_staging "
    "(LIKE attempts INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
)

_UPSERT_RUNS_ON_CONFLICT = """
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
"""

_RUNS_COLUMNS = (
    "run_id, first_event_ns, last_event_ns, shard_ids, declared_shard_count, "
    "concurrency_cap, sweep_id, attempts, updated_at"
)

_MERGE_FROM_STAGING = f"""
WITH inserted AS (
    INSERT INTO attempts ({_COLUMNS})
    SELECT {_COLUMNS} FROM attempts_staging
    ON CONFLICT (trace_id, span_id) DO NOTHING
    RETURNING run_id, shard_id, end_ns, declared_shard_count, concurrency_cap, sweep_id
), per_run AS (
    INSERT INTO runs AS r ({_RUNS_COLUMNS})
    SELECT run_id, min(end_ns), max(end_ns), array_agg(DISTINCT shard_id ORDER BY shard_id),
           max(declared_shard_count), max(concurrency_cap), max(sweep_id), count(*),
           clock_timestamp()
    FROM inserted GROUP BY run_id ORDER BY run_id
    {_UPSERT_RUNS_ON_CONFLICT}
    RETURNING 1
)
SELECT (SELECT count(*) FROM inserted), (SELECT count(*) FROM per_run)
"""

_UPSERT_RUNS = f"""
INSERT INTO runs AS r ({_RUNS_COLUMNS})
SELECT run_id, first_ns, last_ns, shard_ids, declared, cap, sweep, n, clock_timestamp()
FROM unnest(%s::text[], %s::bigint[], %s::bigint[], %s::text[], %s::int[], %s::int[],
            %s::text[], %s::bigint[])
     AS u(run_id, first_ns, last_ns, shard_csv, declared, cap, sweep, n)
CROSS JOIN LATERAL (SELECT string_to_array(shard_csv, chr(31)) AS shard_ids) s
ORDER BY run_id
{_UPSERT_RUNS_ON_CONFLICT}
"""


def copy_rows(conn: psycopg.Connection, table: str, rows: Iterable[Sequence[Any]]) -> None:
    """COPY rows (in ATTEMPT_COPY_COLUMNS order) into ``table``; used by the benchmark too."""
    with conn.cursor() as cur, cur.copy(f"COPY {table} ({_COLUMNS}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def write_attempts(conn: psycopg.Connection, rows: Iterable[Sequence[Any]]) -> int:
    """Store attempt rows idempotently inside the caller's transaction; returns how many were new.

    Must run inside :func:`storage.database.in_transaction` or
    :func:`storage.database.raw_transaction`.
    """
    batch = rows if isinstance(rows, list) else list(rows)
    if not batch:
        return 0
    try:
        with conn.transaction():  # a savepoint: a duplicate undoes only this attempt
            copy_rows(conn, "attempts", batch)
    except errors.UniqueViolation:
        return _write_through_staging(conn, batch)
    _upsert_runs(conn, batch)
    return len(batch)


def _write_through_staging(conn: psycopg.Connection, rows: list[Sequence[Any]]) -> int:
    with conn.cursor() as cur:
        cur.execute(_CREATE_STAGING)
    copy_rows(conn, "attempts_staging", rows)
    with conn.cursor() as cur:
        cur.execute(_MERGE_FROM_STAGING)
        result = cur.fetchone()
        cur.execute("TRUNCATE attempts_staging")
    return int(result[0]) if result else 0


def _upsert_runs(conn: psycopg.Connection, rows: list[Sequence[Any]]) -> None:
    """Fold the inserted rows into one ``runs`` upsert per run (sorted: no lock-order deadlock)."""
    per_run: dict[str, list[Any]] = {}
    for row in rows:
        run = per_run.get(row[_RUN_ID])
        end_ns = row[_END_NS]
        if run is None:
            per_run[row[_RUN_ID]] = [
                end_ns, end_ns, {row[_SHARD_ID]}, row[_DECLARED], row[_CAP], row[_SWEEP], 1
            ]  # fmt: skip
            continue
        if end_ns < run[0]:
            run[0] = end_ns
        elif end_ns > run[1]:
            run[1] = end_ns
        run[2].add(row[_SHARD_ID])
        for slot, index in ((3, _DECLARED), (4, _CAP), (5, _SWEEP)):
            value = row[index]
            if value is not None and (run[slot] is None or value > run[slot]):
                run[slot] = value
        run[6] += 1
    run_ids = sorted(per_run)
    columns: list[list[Any]] = [[] for _ in range(8)]
    for run_id in run_ids:
        first, last, shards, declared, cap, sweep, count = per_run[run_id]
        values = (run_id, first, last, "\x1f".join(sorted(shards)), declared, cap, sweep, count)
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    with conn.cursor() as cur:
        cur.execute(_UPSERT_RUNS, columns)
