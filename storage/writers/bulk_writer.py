"""The bulk write path: COPY rows into ``attempts``, idempotent on (trace_id, span_id).

Rows arrive as tuples in :data:`storage.schema.models.ATTEMPT_COPY_COLUMNS` order, or already
encoded as COPY text blocks (:mod:`storage.codecs.attempt_encoding`) with their run tallies.

Re-sent spans are rare (an exporter retrying after a lost answer), so the common case is
optimistic: COPY straight into ``attempts`` inside a savepoint. If any row is already
stored (or repeated in the batch) the savepoint rolls back and the batch takes the slow
path: COPY into a staging table and ``INSERT … ON CONFLICT DO NOTHING``. Either way the
``runs`` table is updated only with rows that were actually inserted, so a re-send
changes nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from psycopg import errors

from tpmledger.storage.codecs.attempt_encoding import (
    ENCODED_COLUMNS,
    AttemptBlock,
    RunTally,
    encode_attempts,
    merge_runs,
)
from tpmledger.storage.schema.attempt_columns import ATTEMPT_COPY_COLUMNS
from tpmledger.storage.writers.tool_span_store import write_tool_blocks

_COLUMNS = ", ".join(ATTEMPT_COPY_COLUMNS)
_ENCODED = ", ".join(ENCODED_COLUMNS)

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
        declared_shard_count = GREATEST(excluded.declared_shard_count, r.declared_shard_count),
        concurrency_cap = GREATEST(excluded.concurrency_cap, r.concurrency_cap),
        sweep_id = COALESCE(excluded.sweep_id, r.sweep_id),
        attempts = r.attempts + excluded.attempts,
        max_slot_ns = GREATEST(r.max_slot_ns, excluded.max_slot_ns),
        wait_until_ns = GREATEST(r.wait_until_ns, excluded.wait_until_ns),
        updated_at = excluded.updated_at
    RETURNING r.archived_at IS NOT NULL AS archived
"""

_RUNS_COLUMNS = (
    "run_id, first_event_ns, last_event_ns, shard_ids, declared_shard_count, "
    "concurrency_cap, sweep_id, attempts, max_slot_ns, wait_until_ns, updated_at"
)

_MERGE_FROM_STAGING = f"""
WITH inserted AS (
    INSERT INTO attempts ({_COLUMNS})
    SELECT {_COLUMNS} FROM attempts_staging
    ON CONFLICT DO NOTHING
    RETURNING run_id, shard_id, end_ns, declared_shard_count, concurrency_cap, sweep_id,
              -- As attempt_encoding does. LEAST and GREATEST skip NULLs: NULL waits are
              -- tested first, never capped into 3e9 s.
              end_ns - start_ns
              + CASE WHEN queue_wait_s > 0 THEN round(least(queue_wait_s, 3e9) * 1e9)::bigint
                     ELSE 0 END AS slot_ns,
              CASE WHEN retry_after_s > 0
                   THEN end_ns + round(least(retry_after_s, 3e9) * 1e9)::bigint END
                  AS wait_until_ns
), per_run AS (
    INSERT INTO runs AS r ({_RUNS_COLUMNS})
    SELECT run_id, min(end_ns), max(end_ns), array_agg(DISTINCT shard_id ORDER BY shard_id),
           max(declared_shard_count), max(concurrency_cap), max(sweep_id), count(*),
           max(slot_ns), max(wait_until_ns), clock_timestamp()
    FROM inserted GROUP BY run_id ORDER BY run_id
    {_UPSERT_RUNS_ON_CONFLICT}
)
SELECT (SELECT count(*) FROM inserted), (SELECT count(*) FROM per_run WHERE archived)
"""

_UPSERT_RUNS = f"""
INSERT INTO runs AS r ({_RUNS_COLUMNS})
SELECT run_id, first_ns, last_ns, shard_ids, declared, cap, sweep, n, slot, wait_until,
       clock_timestamp()
FROM unnest(%s::text[], %s::bigint[], %s::bigint[], %s::text[], %s::int[], %s::int[],
            %s::text[], %s::bigint[], %s::bigint[], %s::bigint[])
     AS u(run_id, first_ns, last_ns, shard_csv, declared, cap, sweep, n, slot, wait_until)
CROSS JOIN LATERAL (SELECT string_to_array(shard_csv, chr(31)) AS shard_ids) s
ORDER BY run_id
{_UPSERT_RUNS_ON_CONFLICT}
"""

# The live minute table's queue (docs/metrics.md#live-figures): which minutes this commit
# touched, drained by the analytics worker. Marking minutes of re-sent rows too is harmless
# (the worker recomputes a minute from what is stored).
_MARK_DIRTY = """
INSERT INTO live_dirty (run_id, end_minute_ns, from_minute_ns, batch_id)
SELECT u.*, %s FROM unnest(%s::text[], %s::bigint[], %s::bigint[]) AS u
"""
# Runs archived by ``tpmledger prune`` refuse new spans (docs/operations.md#retention-and-archives).
_ARCHIVED = (
    "SELECT run_id, archived_at, archive_dir FROM runs "
    "WHERE archived_at IS NOT NULL AND run_id = ANY(%s)"
)
# Every row this transaction stores gets this batch id (the column's default reads it).
_NEW_BATCH = "SELECT set_config('tpmledger.ingest_batch', nextval('ingest_batches')::text, true)"


def copy_blocks(conn: psycopg.Connection, table: str, blocks: Iterable[AttemptBlock]) -> None:
    """COPY pre-encoded attempt blocks into ``table``; used by the benchmark too."""
    with conn.cursor() as cur, cur.copy(f"COPY {table} ({_ENCODED}) FROM STDIN") as copy:
        for block in blocks:
            copy.write(block.text)


def write_attempts(conn: psycopg.Connection, rows: Iterable[Sequence[Any]]) -> int:
    """Store attempt rows idempotently inside the caller's transaction; returns how many were new.

    Rows are tuples in ``ATTEMPT_COPY_COLUMNS`` order. Must run inside
    :func:`storage.server.database.in_transaction` or
    :func:`storage.server.database.raw_transaction`.
    """
    return write_attempt_blocks(conn, [encode_attempts(rows)])


class RunArchivedMeanwhile(RuntimeError):
    """A run of the batch was archived while the batch was being written: the transaction
    must roll back and be written again (the second time its spans are refused)."""


def write_attempt_blocks(
    conn: psycopg.Connection, blocks: Sequence[AttemptBlock], *, known_duplicates: bool = False
) -> int:
    """Like :func:`write_attempts`, for rows already encoded by
    :func:`storage.codecs.attempt_encoding.encode_attempts` (ingest encodes per request).
    The blocks' tool spans are stored too (not counted in the result).

    Spans of archived runs are never stored: they are taken out of their block and
    recorded in its ``refused`` (the request's answer reports them). A run archived after
    that check but before this transaction's ``runs`` upsert (which waits for the prune's
    row lock) raises :class:`RunArchivedMeanwhile`; the caller rolls back and retries.
    ``known_duplicates``: some rows are stored already, go through the staging table at once.
    """
    _refuse(blocks, _archived_runs(conn, blocks))
    write_tool_blocks(conn, blocks)
    blocks = [block for block in blocks if block.rows]
    if not blocks:
        return 0
    row = conn.execute(_NEW_BATCH).fetchone()
    batch = int(row[0]) if row else None
    if known_duplicates:
        return _write_staged(conn, blocks, batch)
    try:
        with conn.transaction():  # a savepoint: a duplicate undoes only this attempt
            copy_blocks(conn, "attempts", blocks)
    except (errors.UniqueViolation, errors.InternalError_) as exc:
        if not _is_duplicate(exc):
            raise
        return _write_staged(conn, blocks, batch)
    runs = merge_runs(blocks)
    _raise_if_archived(_upsert_runs(conn, runs))
    _mark_dirty(conn, runs, batch)
    return sum(block.rows for block in blocks)


def commit_attempt_blocks(conn: psycopg.Connection, blocks: Sequence[AttemptBlock]) -> int:
    """Store ``blocks`` in one transaction of their own on ``conn`` (a long-lived
    connection, idle, not autocommit) and commit it; returns how many rows were new.

    The same effect as :func:`write_attempt_blocks` inside
    :func:`storage.server.database.in_transaction`, in half the round trips to the
    server (the group commit's path, issue 39): the statements before the COPY go in one
    pipeline with the BEGIN, those after it in another, and the COPY runs without a
    savepoint. A span stored already then fails the whole transaction, which rolls back
    and is written again through the staging table; re-sent spans are rare. Under load a
    round trip waits for both the writer and its backend to get a core, so each one saved
    shortens every commit. Rolls back and raises on any error.
    """
    try:
        stored = _write_pipelined(conn, blocks)
    except (errors.UniqueViolation, errors.InternalError_) as exc:
        _rollback(conn)
        if not _is_duplicate(exc):
            raise
        with conn.transaction():
            return write_attempt_blocks(conn, blocks, known_duplicates=True)
    except BaseException:
        _rollback(conn)
        raise
    conn.commit()
    return stored


def _rollback(conn: psycopg.Connection) -> None:
    # A broken connection cannot roll back: the caller sees the first error, not this one.
    with contextlib.suppress(psycopg.Error):
        conn.rollback()


def _write_pipelined(conn: psycopg.Connection, blocks: Sequence[AttemptBlock]) -> int:
    run_ids = _run_ids(blocks)
    with conn.pipeline():  # BEGIN, the archived runs and the batch id: one round trip
        archived = conn.execute(_ARCHIVED, (sorted(run_ids),)) if run_ids else None
        numbered = conn.execute(_NEW_BATCH) if any(block.rows for block in blocks) else None
    _refuse(blocks, archived.fetchall() if archived is not None else [])
    write_tool_blocks(conn, blocks)
    blocks = [block for block in blocks if block.rows]
    if not blocks or numbered is None:
        return 0
    row = numbered.fetchone()
    batch = int(row[0]) if row else None
    copy_blocks(conn, "attempts", blocks)
    runs = merge_runs(blocks)
    with conn.pipeline():  # the runs upsert and the live marks: one round trip
        upserted = _upsert_runs(conn, runs)
        _mark_dirty(conn, runs, batch)
    _raise_if_archived(upserted)
    return sum(block.rows for block in blocks)


def _is_duplicate(exc: psycopg.Error) -> bool:
    """A stored (or repeated) span: PostgreSQL's unique violation, or the same error as a
    Citus coordinator relays it from a worker during COPY (its text, without the code)."""
    if isinstance(exc, errors.UniqueViolation):
        return True
    message = exc.diag.message_primary or ""
    return message.startswith("duplicate key value violates unique constraint")


def _write_staged(conn: psycopg.Connection, blocks: list[AttemptBlock], batch: int | None) -> int:
    stored = _write_through_staging(conn, blocks)
    _mark_dirty(conn, merge_runs(blocks), batch)
    return stored


def _write_through_staging(conn: psycopg.Connection, blocks: list[AttemptBlock]) -> int:
    with conn.cursor() as cur:
        cur.execute(_CREATE_STAGING)
    copy_blocks(conn, "attempts_staging", blocks)
    with conn.cursor() as cur:
        cur.execute(_MERGE_FROM_STAGING)
        result = cur.fetchone()
        cur.execute("TRUNCATE attempts_staging")
    if result and result[1]:
        raise RunArchivedMeanwhile("a run of this batch was archived meanwhile")
    return int(result[0]) if result else 0


def _run_ids(blocks: Sequence[AttemptBlock]) -> set[str]:
    run_ids: set[str] = set()
    for block in blocks:
        run_ids.update(block.runs)
        if block.tool_rows:
            run_ids.update(block.tool_run_ids())
    return run_ids


def _archived_runs(conn: psycopg.Connection, blocks: Sequence[AttemptBlock]) -> list[Any]:
    run_ids = _run_ids(blocks)
    return conn.execute(_ARCHIVED, (sorted(run_ids),)).fetchall() if run_ids else []


def _refuse(blocks: Sequence[AttemptBlock], archived: list[Any]) -> None:
    """Take the spans of the ``archived`` runs (rows of :data:`_ARCHIVED`) out of ``blocks``."""
    if not archived:
        return
    reasons = {
        str(run_id): (
            f"run {run_id!r} was archived on {when:%Y-%m-%d %H:%M} UTC into {where} "
            "(tpmledger prune); its new spans are refused"
        )
        for run_id, when, where in archived
    }
    for block in blocks:
        block.refuse_runs(reasons)


def _upsert_runs(conn: psycopg.Connection, runs: dict[str, RunTally]) -> psycopg.Cursor[Any]:
    """One ``runs`` upsert for every run of the batch (sorted: no lock-order deadlock);
    its cursor holds whether each run is archived (:func:`_raise_if_archived`)."""
    columns: list[list[Any]] = [[] for _ in range(10)]
    for run_id in sorted(runs):
        t = runs[run_id]
        values = (
            run_id,
            t.first_ns,
            t.last_ns,
            "\x1f".join(sorted(t.shard_ids)),
            t.declared_shard_count,
            t.concurrency_cap,
            t.sweep_id,
            t.attempts,
            t.max_slot_ns,
            t.wait_until_ns or None,
        )
        for column, value in zip(columns, values, strict=True):
            column.append(value)
    return conn.execute(_UPSERT_RUNS, columns)


def _raise_if_archived(upserted: psycopg.Cursor[Any]) -> None:
    if any(archived for (archived,) in upserted.fetchall()):
        raise RunArchivedMeanwhile("a run of this batch was archived meanwhile")


def _mark_dirty(conn: psycopg.Connection, runs: dict[str, RunTally], batch: int | None) -> None:
    """Queue the (run, minute) cells the batch touched for the live minute table."""
    run_ids: list[str] = []
    ends: list[int] = []
    froms: list[int] = []
    for run_id in sorted(runs):
        for end_minute, from_minute in runs[run_id].touched.items():
            run_ids.append(run_id)
            ends.append(end_minute)
            froms.append(from_minute)
    if run_ids:
        conn.execute(_MARK_DIRTY, (batch, run_ids, ends, froms))
