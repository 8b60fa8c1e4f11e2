"""What the streaming seal reads (docs/provenance.md#streaming-seal): a run's plan, the two
sets that settle what an attempt's figures need from other attempts, and its attempts one
end-time range at a time.

Everything runs on the caller's connection, inside its REPEATABLE READ transaction, so a
seal's chunks, its rollup set and its call set describe one moment. A :class:`SealScope`
keeps a checkpoint to the attempts that ended before its cut and a rebuilt version to the
attempts stored by its ``data_as_of``; every query applies it (to children and call
siblings too), so the attempts seen are exactly those a whole-run read would see.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import polars as pl
import psycopg
from psycopg import sql

from tpmledger.storage.codecs.binary_copy import Kind
from tpmledger.storage.readers.attempt_frames import ATTEMPT_COPY_KINDS, copy_select
from tpmledger.storage.readers.call_attempts import resolved_columns, resolved_join, run_has_http
from tpmledger.storage.readers.seal_scope import SealScope
from tpmledger.storage.server.database import raw_transaction
from tpmledger.storage.server.distribution import attempts_distributed

_SEAL_WORK_MEM = "128MB"


@dataclass(frozen=True)
class SealPlan:
    """The extent of a run's stored attempts (rollups included) and what bounds a chunk."""

    attempts: int
    first_end_ns: int | None
    last_end_ns: int | None
    reach_ns: int  # longest queued-to-released interval of any attempt
    caps: dict[str, int]  # largest declared concurrency cap per shard (rollups too)
    shard_ids: tuple[str, ...]  # every shard with a stored attempt, sorted


def prepare_seal_transaction(conn: psycopg.Connection) -> None:
    """Planner settings for this transaction only: room for the seal's sorts and joins,
    and page costs of a database in memory, so a run that is a small part of a large
    table is read through the (run_id, end_ns) index instead of a scan of every run."""
    conn.execute(sql.SQL("SET LOCAL work_mem = {}").format(sql.Literal(_SEAL_WORK_MEM)))
    conn.execute("SET LOCAL random_page_cost = 1.1")


@contextmanager
def snapshot_twin(conn: psycopg.Connection, url: str) -> Iterator[psycopg.Connection]:
    """A second connection that sees exactly ``conn``'s snapshot (``pg_export_snapshot`` /
    ``SET TRANSACTION SNAPSHOT``, as ``pg_dump --jobs`` does): a seal reads on both at once
    and still describes one moment. ``conn`` must be in a REPEATABLE READ transaction.
    On Citus the twin is ``conn`` itself: an exported snapshot does not reach the workers
    (:func:`storage.server.distribution.attempts_distributed`); the reads then take turns
    on the one connection (psycopg serializes them), in its one snapshot on the worker."""
    if attempts_distributed(conn):
        yield conn
        return
    row = conn.execute("SELECT pg_export_snapshot()").fetchone()
    assert row is not None
    with raw_transaction(url) as twin:
        twin.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        twin.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(row[0])))
        prepare_seal_transaction(twin)
        yield twin


def fetch_seal_plan(conn: psycopg.Connection, run_id: str, scope: SealScope) -> SealPlan:
    """Counts, extent, longest interval, caps and shards of the attempts in ``scope``."""
    query = sql.SQL(
        """
        SELECT shard_id, count(*), min(end_ns), max(end_ns),
               max(end_ns - start_ns
                   + coalesce(round(least(greatest(queue_wait_s, 0), 3e9) * 1e9)::bigint, 0)),
               max(concurrency_cap)
        FROM attempts WHERE run_id = {} AND {} GROUP BY shard_id ORDER BY shard_id
        """
    ).format(sql.Literal(run_id), scope.on())
    rows = conn.execute(query).fetchall()
    ends = [(r[2], r[3]) for r in rows]
    return SealPlan(
        attempts=sum(int(r[1]) for r in rows),
        first_end_ns=min((int(e[0]) for e in ends), default=None),
        last_end_ns=max((int(e[1]) for e in ends), default=None),
        reach_ns=max((int(r[4]) for r in rows), default=0),
        caps={str(r[0]): int(r[5]) for r in rows if r[5] is not None},
        shard_ids=tuple(sorted(str(r[0]) for r in rows)),
    )


def fetch_rollup_ids(conn: psycopg.Connection, run_id: str, scope: SealScope) -> pl.DataFrame:
    """(trace_id, span_id) in hex of every rollup: an attempt that another attempt of the
    run names as parent (docs/conventions.md#rollups). Usually empty or small."""
    query = sql.SQL(
        """
        SELECT DISTINCT p.trace_id, p.span_id
        FROM attempts c
        JOIN attempts p ON p.trace_id = c.trace_id AND p.span_id = c.parent_span_id
                       AND p.run_id = c.run_id
        WHERE c.run_id = {run} AND c.parent_span_id IS NOT NULL AND {child}
        """
    ).format(run=sql.Literal(run_id), child=scope.on("c"))
    kinds: dict[str, Kind] = {"trace_id": "hex", "span_id": "hex"}
    return copy_select(conn, query, kinds)


def fetch_repeated_calls(conn: psycopg.Connection, run_id: str, scope: SealScope) -> pl.DataFrame:
    """Every attempt whose ``call_id`` may be shared by another attempt of the run (rollups
    too, to be removed by the caller): ids in hex, ``call_id``, ``start_ns``, ``end_ns``.

    Only these attempts need ordering within their call; every other attempt is the first
    and last of its own call. Calls are found by a 64-bit hash of their id, grouped by
    sorting (a hash aggregate of ten million call ids spilled to disk and took twice as
    long); a collision only brings in a few single-attempt calls, which the caller groups
    by the real id. The set is as large as the run's retried calls.
    """
    query = sql.SQL(
        """
        WITH repeated AS MATERIALIZED (
            SELECT h FROM (
                SELECT hashtextextended(call_id, 0) AS h FROM attempts
                WHERE run_id = {run} AND {within_all}
            ) ids
            GROUP BY h HAVING count(*) > 1
        )
        SELECT a.trace_id, a.span_id, a.call_id, a.start_ns, a.end_ns
        FROM attempts a
        WHERE a.run_id = {run} AND {within}
          AND hashtextextended(a.call_id, 0) IN (SELECT h FROM repeated)
        """
    ).format(run=sql.Literal(run_id), within=scope.on("a"), within_all=scope.on())
    kinds: dict[str, Kind] = {
        "trace_id": "hex",
        "span_id": "hex",
        "call_id": "text",
        "start_ns": "integer",
        "end_ns": "integer",
    }
    conn.execute("SET LOCAL enable_hashagg = off")  # (an error aborts the transaction)
    frame = copy_select(conn, query, kinds)
    conn.execute("SET LOCAL enable_hashagg = on")
    return frame


# The stored columns a canonical event is made of (docs/provenance.md#canonical-event-file):
# a run read's columns (storage/schema/attempt_columns.py) but the two no event carries.
_ATTEMPT_KINDS: dict[str, Kind] = {
    name: kind
    for name, kind in ATTEMPT_COPY_KINDS.items()
    if name not in ("parent_span_id", "concurrency_cap")
}


def fetch_attempts_ending(
    conn: psycopg.Connection,
    run_id: str,
    scope: SealScope,
    low_ns: int,
    high_ns: int,
    *,
    began_before_ns: int | None = None,
) -> pl.DataFrame:
    """Attempts ending in [low_ns, high_ns) (ids in hex, ``run_id`` added), through the
    (run_id, end_ns) index; with ``began_before_ns``, only those whose queued-to-released
    interval began before it (the attempts still holding a slot or queued at a chunk's end).
    """
    condition = sql.SQL("{} AND x.end_ns >= {} AND x.end_ns < {}").format(
        scope.on("x"), sql.Literal(int(low_ns)), sql.Literal(int(high_ns))
    )
    if began_before_ns is not None:
        began = sql.SQL(
            "x.start_ns - coalesce(round(least(greatest(x.queue_wait_s, 0), 3e9) * 1e9)::bigint, 0)"
        )
        condition = sql.SQL("{} AND {} < {}").format(
            condition, began, sql.Literal(int(began_before_ns))
        )
    # HTTP attempts read their call's target and tokens (storage/readers/call_attempts.py).
    joined = run_has_http(conn, run_id)
    query = sql.SQL("SELECT {} FROM attempts x {} WHERE x.run_id = {} AND {}").format(
        sql.SQL(resolved_columns(_ATTEMPT_KINDS, "x", joined=joined)),
        sql.SQL(resolved_join("x", "{run}", scope.received_by) if joined else "").format(
            run=sql.Literal(run_id)
        ),
        sql.Literal(run_id),
        condition,
    )
    frame = copy_select(conn, query, _ATTEMPT_KINDS)
    return frame.with_columns(run_id=pl.lit(run_id, dtype=pl.String))
