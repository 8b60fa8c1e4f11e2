"""Columnar reads of one run's attempts: ``COPY (SELECT …) TO STDOUT`` straight into Polars.

No ORM rows: PostgreSQL writes its binary COPY format and compiled code parses it into
columns (:mod:`storage.codecs.binary_copy`). Against CSV parsed by Polars, at a million rows
this saved about 0.5 s of the server's CPU (no number formatting, ids sent as raw bytes)
and about 1 s of this process's (no text parsing). Ids become lowercase hex; doubles
and integers arrive exactly.
"""

from __future__ import annotations

import io
import select
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import polars as pl
import psycopg
from psycopg import pq, sql

from tpmledger.compiled_kernels import kernels_ready
from tpmledger.storage.codecs.binary_copy import Kind, parse_binary_copy
from tpmledger.storage.readers.call_attempts import resolved_columns, resolved_join, run_has_http
from tpmledger.storage.readers.snapshots_read import ANNOUNCED_WAIT_SQL
from tpmledger.storage.schema.attempt_columns import ATTEMPT_COLUMNS, ReadAs
from tpmledger.storage.server.database import raw_transaction
from tpmledger.storage.server.distribution import attempts_distributed

_POLARS_TYPES: dict[ReadAs, pl.DataType] = {
    "hex": pl.String(),
    "text": pl.String(),
    "integer": pl.Int64(),
    "float": pl.Float64(),
}
# The columns a run read returns (storage/schema/attempt_columns.py), in COPY order.
_READ: dict[str, ReadAs] = {c.name: c.read for c in ATTEMPT_COLUMNS if c.read is not None}
ATTEMPT_FRAME_SCHEMA: dict[str, pl.DataType] = {n: _POLARS_TYPES[r] for n, r in _READ.items()}
# What the COPY sends (every column but run_id, the filter) and how each is parsed.
ATTEMPT_COPY_KINDS: dict[str, Kind] = {n: r for n, r in _READ.items() if n != "run_id"}


@dataclass(frozen=True)
class RunFacts:
    """The ``runs`` row of one run, as ingest keeps it current."""

    run_id: str
    updated_at: datetime
    declared_shard_count: int | None
    concurrency_cap: int | None
    sweep_id: str | None
    attempts: int
    # Seconds its clients were told to wait beyond its newest attempt (Retry-After): the
    # quiet period starts after them (storage/readers/snapshots_read.py).
    announced_wait_s: float = 0.0


def begin_repeatable_read(conn: psycopg.Connection) -> None:
    """Make the caller's (just opened) transaction see one consistent snapshot."""
    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")


def fetch_run_facts(conn: psycopg.Connection, run_id: str) -> RunFacts | None:
    """The run's ``runs`` row, or None for an unknown run."""
    row = conn.execute(
        "SELECT run_id, updated_at, declared_shard_count, concurrency_cap, sweep_id, attempts, "
        f"{ANNOUNCED_WAIT_SQL} FROM runs r WHERE run_id = %s",
        (run_id,),
    ).fetchone()
    return RunFacts(*row) if row else None


def _next_result(pgconn: pq.abc.PGconn) -> pq.abc.PGresult | None:
    """libpq's next result, waiting for the socket outside the GIL (non-blocking conn)."""
    while pgconn.is_busy():
        select.select([pgconn.socket], [], [])
        pgconn.consume_input()
    return pgconn.get_result()


def _copy_out(conn: psycopg.Connection, query: bytes) -> io.BytesIO:
    """All rows of a ``COPY … TO STDOUT`` (one libpq message per row) in one buffer.

    psycopg's ``Copy`` object costs ~2 µs of Python per row; at a million rows that was
    the largest part of a seal's CPU in fetch, so the documented low-level ``psycopg.pq``
    calls are used instead, on the same connection and transaction; a server error is
    raised as the matching psycopg exception.
    """
    pgconn, buffer = conn.pgconn, io.BytesIO()
    with conn.lock:
        pgconn.send_query(query)
        while pgconn.flush():  # psycopg keeps its connections in non-blocking mode
            select.select([pgconn.socket], [pgconn.socket], [])
        result = _next_result(pgconn)
        if result is not None and result.status == pq.ExecStatus.COPY_OUT:
            read, write, socket = pgconn.get_copy_data, buffer.write, pgconn.socket
            while True:
                size, data = read(1)  # non-blocking: 0 = no whole row buffered yet
                if size > 0:
                    write(data)
                elif size == 0:
                    select.select([socket], [], [])
                    pgconn.consume_input()
                else:
                    break
            result = _next_result(pgconn)
        while _next_result(pgconn) is not None:
            pass  # drain, so the connection is ready for the next command
    if result is None or result.status != pq.ExecStatus.COMMAND_OK:
        if result is not None and result.status == pq.ExecStatus.FATAL_ERROR:
            raise psycopg.errors.error_from_result(result, encoding=conn.info.encoding)
        message = pgconn.error_message.decode(errors="replace").strip()
        raise psycopg.OperationalError(f"COPY of run attempts failed: {message}")
    return buffer


# Runs at least this large are read over two connections at once (see fetch_run_attempts).
SPLIT_FETCH_MIN_ATTEMPTS = 100_000


def _copy_query(
    run_id: str,
    condition: sql.Composable,
    received_by: datetime | None = None,
    joined: bool = True,
) -> sql.Composed:
    # HTTP attempts read their call's target and tokens (storage/readers/call_attempts.py; not
    # ``joined``: the run has none); the condition names columns of ``attempts`` alone.
    select_list = resolved_columns(ATTEMPT_COPY_KINDS, "x", joined=joined)
    return sql.SQL(
        "COPY (SELECT {} FROM attempts x {} WHERE x.run_id = {} AND {}) TO STDOUT (FORMAT binary)"
    ).format(
        sql.SQL(select_list),
        sql.SQL(resolved_join("x", "{run}", received_by) if joined else "").format(
            run=sql.Literal(run_id)
        ),
        sql.Literal(run_id),
        condition,
    )


def _parse(buffer: io.BytesIO) -> pl.DataFrame:
    """Binary COPY rows (every column but ``run_id``) as a frame."""
    return parse_binary_copy(buffer.getbuffer(), ATTEMPT_COPY_KINDS)


def _copy_and_parse(conn: psycopg.Connection, query: bytes) -> pl.DataFrame:
    return _parse(_copy_out(conn, query))


def copy_select(
    conn: psycopg.Connection, select_query: sql.Composable, kinds: dict[str, Kind]
) -> pl.DataFrame:
    """Rows of ``select_query`` (columns in ``kinds`` order) through binary COPY (through
    an ordinary fetch while this process's compiled parser is not ready)."""
    if not kernels_ready():
        return _fetched(conn, select_query, kinds)
    query = sql.SQL("COPY ({}) TO STDOUT (FORMAT binary)").format(select_query)
    return parse_binary_copy(_copy_out(conn, query.as_bytes(conn)).getbuffer(), kinds)


_DTYPES = {"integer": pl.Int64, "float": pl.Float64, "text": pl.String, "hex": pl.String}
_CONVERT: dict[str, Callable[[Any], Any]] = {
    "integer": int,
    "float": float,
    "text": str,
    "hex": lambda v: bytes(v).hex(),
}


def _fetched(
    conn: psycopg.Connection, select_query: sql.Composable, kinds: dict[str, Kind]
) -> pl.DataFrame:
    """The frame :func:`copy_select` gives, read row by row: slower per row, but no
    compiled code (the live path's first updates, while the worker's kernels compile)."""
    rows = conn.execute(select_query.as_bytes(conn)).fetchall()
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in kinds]
    series = []
    for (name, kind), values in zip(kinds.items(), columns, strict=True):
        convert = _CONVERT[kind]
        converted = [None if v is None else convert(v) for v in values]
        series.append(pl.Series(name, converted, dtype=_DTYPES[kind]))
    return pl.DataFrame(series)


def _split_halves(
    conn: psycopg.Connection,
    url: str,
    run_id: str,
    within: sql.Composable,
    received_by: datetime | None = None,
    joined: bool = True,
) -> list[pl.DataFrame]:
    """The run's rows (those ``within`` holds for) in two halves of its end-time range,
    read by two backends at once.

    The helper connection adopts ``conn``'s snapshot (``pg_export_snapshot`` / ``SET
    TRANSACTION SNAPSHOT``, as ``pg_dump --jobs`` does), so both halves come from one
    consistent view. ``end_ns`` is NOT NULL, so ``< mid`` / ``>= mid`` covers every row.
    Each half is parsed by the thread that received it, so one half's (GIL-free)
    parse overlaps the other half's receiving.
    """
    if attempts_distributed(conn):
        # An exported snapshot does not reach Citus's workers: one read, one snapshot.
        everything = _copy_query(run_id, within, received_by, joined).as_bytes(conn)
        return [_copy_and_parse(conn, everything)]
    snapshot, mid = conn.execute(
        "SELECT pg_export_snapshot(), (first_event_ns / 2 + last_event_ns / 2) "
        "FROM runs WHERE run_id = %s",
        (run_id,),
    ).fetchone() or (None, None)
    if snapshot is None or mid is None:
        everything = _copy_query(run_id, within, received_by, joined).as_bytes(conn)
        return [_copy_and_parse(conn, everything)]
    with raw_transaction(url) as helper, ThreadPoolExecutor(max_workers=1) as pool:
        helper.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        helper.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot)))
        half = sql.Literal(int(mid))
        late = _copy_query(
            run_id, sql.SQL("{} AND x.end_ns >= {}").format(within, half), received_by, joined
        )
        second = pool.submit(_copy_and_parse, helper, late.as_bytes(helper))
        early = _copy_query(
            run_id, sql.SQL("{} AND x.end_ns < {}").format(within, half), received_by, joined
        )
        return [_copy_and_parse(conn, early.as_bytes(conn)), second.result()]


def fetch_run_attempts(
    conn: psycopg.Connection,
    run_id: str,
    *,
    split_url: str | None = None,
    end_before_ns: int | None = None,
    received_by: datetime | None = None,
) -> pl.DataFrame:
    """Every stored attempt of ``run_id`` as a frame of :data:`ATTEMPT_FRAME_SCHEMA`.

    ``run_id`` is the filter, so it is not sent per row (fewer bytes to copy and parse);
    each COPY's rows are gathered into one buffer and parsed in one call.

    PostgreSQL's COPY work is the wall-clock floor of a large fetch, so with
    ``split_url`` (the database URL; ``conn`` must be in a REPEATABLE READ transaction)
    two backends each produce half of the run in the same snapshot. With
    ``end_before_ns``, only the attempts that ended before it (a checkpoint's closed
    minutes); with ``received_by``, only those stored by then (what a version saw).
    """
    within: sql.Composable = sql.SQL("TRUE")
    if end_before_ns is not None:
        within = sql.SQL("x.end_ns < {}").format(sql.Literal(int(end_before_ns)))
    if received_by is not None:
        stored = sql.SQL("x.received_at <= {}").format(sql.Literal(received_by))
        within = sql.SQL("{} AND {}").format(within, stored)
    joined = run_has_http(conn, run_id)
    if split_url is None:
        query = _copy_query(run_id, within, received_by, joined).as_bytes(conn)
        frames = [_copy_and_parse(conn, query)]
    else:
        frames = _split_halves(conn, split_url, run_id, within, received_by, joined)
    frame = pl.concat(frames, rechunk=False) if len(frames) > 1 else frames[0]
    return frame.with_columns(run_id=pl.lit(run_id, dtype=pl.String)).select(
        list(ATTEMPT_FRAME_SCHEMA)
    )
