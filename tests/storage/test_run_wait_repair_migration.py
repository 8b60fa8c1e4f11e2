"""Migration 0025 recomputes the runs whose interval or announced wait the staging path had
stored as the 3e9 s cap (a NULL skipped by LEAST); other runs keep their values."""

from __future__ import annotations

import psycopg

from tpmledger.storage.server import migrate
from tpmledger.storage.server.database import get_engine, libpq_url

SECOND = 10**9
CAP_NS = 3 * 10**18


def _attempt(conn: psycopg.Connection, run_id: str, span: int, end_s: int, **waits: float) -> None:
    conn.execute(
        "INSERT INTO attempts (trace_id, span_id, run_id, shard_id, call_id, call_id_explicit,"
        " start_ns, end_ns, queue_wait_s, retry_after_s, status, span_name, span_kind,"
        " span_attributes, resource_attributes)"
        " VALUES (%s, %s, %s, '0', %s, false, 0, %s, %s, %s, 'ok', 'chat', 3, '{}', '{}')",
        (
            b"\x01" * 16,
            span.to_bytes(8, "big"),
            run_id,
            str(span),
            end_s * SECOND,
            waits.get("queue_wait_s"),
            waits.get("retry_after_s"),
        ),
    )


def _run(
    conn: psycopg.Connection, run_id: str, max_slot_ns: int, wait_until_ns: int | None
) -> None:
    conn.execute(
        "INSERT INTO runs (run_id, first_event_ns, last_event_ns, shard_ids, attempts,"
        " max_slot_ns, wait_until_ns, created_at, updated_at)"
        " VALUES (%s, %s, %s, '{0}', 2, %s, %s, now(), now())",
        (run_id, 2 * SECOND, 5 * SECOND, max_slot_ns, wait_until_ns),
    )


def test_upgrade_recomputes_only_the_runs_holding_the_cap(empty_database_url: str) -> None:
    url = empty_database_url
    migrate.upgrade(url, "0024")
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        for run_id, first in (("broken", 1), ("healthy", 10)):
            _attempt(conn, run_id, first, 2, queue_wait_s=1.5)
            _attempt(conn, run_id, first + 1, 5, retry_after_s=4.0)
        # As the staging path stored them: a NULL Retry-After became end + 3e9 s.
        _run(conn, "broken", CAP_NS + 2 * SECOND, CAP_NS + 2 * SECOND)
        _run(conn, "healthy", 7 * SECOND, 9 * SECOND)  # whatever it holds stays
    get_engine(url).dispose()

    migrate.upgrade(url)
    with psycopg.connect(libpq_url(url)) as conn:
        rows = dict(
            (r[0], (r[1], r[2]))
            for r in conn.execute("SELECT run_id, max_slot_ns, wait_until_ns FROM runs")
        )
    assert rows["broken"] == (5 * SECOND, 9 * SECOND)  # 5 s interval; 5 s end + 4 s wait
    assert rows["healthy"] == (7 * SECOND, 9 * SECOND)
