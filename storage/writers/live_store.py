"""Marks, run facts and row writes of the live minute table (docs/metrics.md#live-figures).

Ingest appends the minutes each commit touched to ``live_dirty``; the analytics worker
takes a run's marks, reads the attempts of the touched minutes (never the whole run;
:mod:`storage.readers.live_window`), and replaces those minutes' rows in ``live_minutes``.
Everything here runs on the caller's connection, inside the one transaction that
:func:`live_transaction` opens: the marks are deleted, the attempts read and the rows
written atomically, so a failed update leaves the marks for the next try.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb
from sqlalchemy import text
from sqlalchemy.orm import Session

from tpmledger.storage.schema.models import LiveMinute, LiveRunMinute
from tpmledger.storage.server.database import connect_raw, in_transaction
from tpmledger.storage.server.distribution import attempts_distributed
from tpmledger.storage.writers.minute_versions import rows_as_of


@dataclass(frozen=True)
class LiveRunFacts:
    """The ``runs`` row facts the live path needs, read in the update's transaction."""

    run_id: str
    updated_at: datetime
    first_event_ns: int
    last_event_ns: int
    max_slot_ns: int
    attempts: int  # every attempt of the run stored so far (ingest counts each commit's)


def connect_live(url: str) -> psycopg.Connection:
    """The live updater's own connection, kept between updates (autocommit outside
    :func:`live_transaction`). A fresh connection per update started a new PostgreSQL
    backend, with cold caches, twice per update: on a loaded machine, most of an update's
    wall time (docs/metrics.md#live-figures)."""
    conn = connect_raw(url)
    conn.autocommit = True
    return conn


@contextmanager
def live_transaction(conn: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """One REPEATABLE READ transaction on ``conn`` (commit on exit, rollback on error)."""
    with in_transaction(conn):
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield conn


def summarize_new_batches(conn: psycopg.Connection) -> None:
    """Summarize the block ranges filled since the last call, so looking up new commits'
    rows reads only their pages (an unsummarized range is read whole on every lookup;
    autovacuum would summarize them, but not soon enough under a steady ingest)."""
    with in_transaction(conn):
        if attempts_distributed(conn):
            # On Citus the coordinator's table is empty; each shard has its own index.
            conn.execute(_SUMMARIZE_SHARDS)
        else:
            conn.execute("SELECT brin_summarize_new_values('ix_attempts_ingest_batch')")


_SUMMARIZE_SHARDS = """SELECT run_command_on_shards('attempts', $$SELECT brin_summarize_new_values(
    replace('%s', 'attempts_', 'ix_attempts_ingest_batch_')::regclass)$$)"""


def dirty_run_ids(session: Session) -> list[str]:
    """Runs with queued marks, in id order."""
    rows = session.execute(text("SELECT DISTINCT run_id FROM live_dirty ORDER BY run_id"))
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
        "SELECT run_id, updated_at, first_event_ns, last_event_ns, coalesce(max_slot_ns, 0), "
        "attempts FROM runs WHERE run_id = %s",
        (run_id,),
    ).fetchone()
    return LiveRunFacts(*row) if row else None


# The rows of the run's newest version (storage/writers/minute_versions.py).
_NEWEST_ROWS = rows_as_of(
    "%(run)s",
    "(SELECT max(version) FROM snapshots WHERE run_id = %(run)s)",
    ("concurrency_cap",),
)
_CAPS_SQL = """
        SELECT shard_id, max(concurrency_cap) FROM (
            SELECT shard_id, concurrency_cap FROM live_minutes WHERE run_id = %(run)s
            UNION ALL
            SELECT m.shard_id, m.concurrency_cap FROM ({newest}) m
        ) caps
        WHERE shard_id <> '*' AND concurrency_cap IS NOT NULL
        GROUP BY shard_id
        """


def known_caps(conn: psycopg.Connection, run_id: str) -> dict[str, int]:
    """Each shard's cap as the run's live rows and newest snapshot recorded it."""
    rows = conn.execute(
        _CAPS_SQL.format(newest=_NEWEST_ROWS),
        {"run": run_id},
    ).fetchall()
    return {str(shard): int(cap) for shard, cap in rows}


def mark_stale_caps(conn: psycopg.Connection, run_id: str, caps: dict[str, int]) -> int:
    """Queue again the minutes whose work-conserving seconds were counted against an
    older cap of their shard (a larger cap was declared since), in the live rows or in
    the run facts that outlive them; returns how many."""
    if not caps:
        return 0
    shards, values = list(caps), [caps[s] for s in caps]
    cursor = conn.execute(
        """
        INSERT INTO live_dirty (run_id, end_minute_ns, from_minute_ns)
        SELECT DISTINCT l.run_id,
               extract(epoch FROM l.minute_utc)::bigint * 1000000000,
               extract(epoch FROM l.minute_utc)::bigint * 1000000000
        FROM live_minutes l
        JOIN unnest(%s::text[], %s::int[]) AS c(shard_id, cap) ON c.shard_id = l.shard_id
        WHERE l.run_id = %s AND l.queue_seconds > 0 AND l.sag_cap IS DISTINCT FROM c.cap
        UNION
        SELECT f.run_id,
               extract(epoch FROM f.minute_utc)::bigint * 1000000000,
               extract(epoch FROM f.minute_utc)::bigint * 1000000000
        FROM live_run_minutes f
        CROSS JOIN LATERAL jsonb_each(f.work_seconds) AS w(shard_id, counts)
        JOIN unnest(%s::text[], %s::int[]) AS c(shard_id, cap) ON c.shard_id = w.shard_id
        WHERE f.run_id = %s AND (w.counts ->> 0)::bigint > 0
          AND (w.counts ->> 2)::int IS DISTINCT FROM c.cap
        """,
        (shards, values, run_id, shards, values, run_id),
    )
    return cursor.rowcount


def known_max_timeout(conn: psycopg.Connection, run_id: str) -> float | None:
    """The largest request timeout the run's per-minute facts recorded."""
    row = conn.execute(
        "SELECT max((max_timeout_s)::float8) FROM live_run_minutes WHERE run_id = %s",
        (run_id,),
    ).fetchone()
    return None if row is None or row[0] is None else float(row[0])


def mark_stale_timeouts(conn: psycopg.Connection, run_id: str, limit: float) -> int:
    """Queue again the minutes whose attempts without a deadline of their own were
    checked against another run-wide request timeout than ``limit``; returns how many."""
    cursor = conn.execute(
        """
        INSERT INTO live_dirty (run_id, end_minute_ns, from_minute_ns)
        SELECT f.run_id,
               extract(epoch FROM f.minute_utc)::bigint * 1000000000,
               extract(epoch FROM f.minute_utc)::bigint * 1000000000
        FROM live_run_minutes f
        WHERE f.run_id = %s AND (f.deadline ->> 'without_own')::bigint > 0
          AND (f.deadline ->> 'limit')::float8 IS DISTINCT FROM %s
        """,
        (run_id, limit),
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


_RUN_MINUTE_COLUMNS: tuple[str, ...] = tuple(c.name for c in LiveRunMinute.__table__.columns)


def replace_run_minutes(
    conn: psycopg.Connection,
    run_id: str,
    minute_starts: Sequence[datetime],
    rows: Sequence[dict[str, Any]],
) -> None:
    """Replace the per-minute run facts of ``minute_starts`` with ``rows`` (kept when a
    snapshot seals the minutes: the run's live figures merge every minute's)."""
    conn.execute(
        "DELETE FROM live_run_minutes WHERE run_id = %s AND minute_utc = ANY(%s)",
        (run_id, list(minute_starts)),
    )
    if not rows:
        return
    statement = sql.SQL("INSERT INTO live_run_minutes ({}) VALUES ({})").format(
        sql.SQL(", ").join(sql.Identifier(c) for c in _RUN_MINUTE_COLUMNS),
        sql.SQL(", ").join(sql.Placeholder() * len(_RUN_MINUTE_COLUMNS)),
    )
    json_columns = {
        "retry_causes",
        "ttft",
        "latency",
        "work_seconds",
        "deadline",
        "tools",
        "targets",
    }
    with conn.cursor() as cursor:
        cursor.executemany(
            statement,
            [
                [Jsonb(r[c]) if c in json_columns and r[c] is not None else r.get(c)
                 for c in _RUN_MINUTE_COLUMNS]
                for r in rows
            ],
        )  # fmt: skip


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
