"""Columnar attempt reads: the low-level COPY path returns every value exactly, and errors
surface as psycopg exceptions with the connection still usable."""

from __future__ import annotations

import psycopg
import pytest

from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.storage.readers.attempt_frames import (
    ATTEMPT_FRAME_SCHEMA,
    _copy_out,
    begin_repeatable_read,
    fetch_run_attempts,
    fetch_run_facts,
)
from tpmledger.storage.server.database import raw_transaction
from tpmledger.storage.writers.bulk_writer import write_attempts

AWKWARD = ['say "hi", then\nleave', "", "back\\slash\tand ,comma", "naïve ☃"]


def test_fetch_returns_every_value_exactly(database_url: str) -> None:
    rows = [
        attempt_row(
            span_id=bytes([i]) * 8,
            parent_span_id=b"\xff" * 8 if i == 0 else None,
            call_id=text,
            model=None if i == 1 else text,
            error_type=text,
            queue_wait_s=0.1 * (i + 1) if i else None,
            ttft_s=1e-7 * (i + 3),
            resend_count=i,
            end_ns=BASE_NS + i,
        )
        for i, text in enumerate(AWKWARD)
    ]
    rows.append(attempt_row(run_id="run-b"))
    with raw_transaction(database_url) as conn:
        write_attempts(conn, rows)
    with raw_transaction(database_url) as conn:
        frame = fetch_run_attempts(conn, "run-a").sort("end_ns")
        # The same connection and transaction keep working after the low-level COPY.
        assert conn.execute("SELECT count(*) FROM attempts").fetchone() == (5,)
    assert frame.schema == ATTEMPT_FRAME_SCHEMA
    assert frame.get_column("call_id").to_list() == AWKWARD
    assert frame.get_column("error_type").to_list() == AWKWARD
    assert frame.get_column("model").to_list() == [AWKWARD[0], None, *AWKWARD[2:]]
    assert frame.get_column("span_id").to_list() == [bytes([i]).hex() * 8 for i in range(4)]
    assert frame.get_column("parent_span_id").to_list() == ["ff" * 8, None, None, None]
    assert frame.get_column("queue_wait_s").to_list() == [None, 0.2, 0.1 * 3, 0.4]
    assert frame.get_column("ttft_s").to_list() == [1e-7 * (i + 3) for i in range(4)]
    assert frame.get_column("run_id").unique().to_list() == ["run-a"]


def test_unknown_run_is_an_empty_frame(database_url: str) -> None:
    with raw_transaction(database_url) as conn:
        frame = fetch_run_attempts(conn, "nobody")
    assert frame.height == 0 and frame.schema == ATTEMPT_FRAME_SCHEMA


@pytest.mark.parametrize(
    "query",
    [
        b"COPY (SELECT 1 / 0) TO STDOUT",
        # fails after two rows were already sent
        b"COPY (SELECT 1 / (3 - g) FROM generate_series(1, 5) g) TO STDOUT",
    ],
)
def test_server_errors_raise_psycopg_errors(database_url: str, query: bytes) -> None:
    with psycopg.connect(database_url) as conn:
        with pytest.raises(psycopg.errors.DivisionByZero):
            _copy_out(conn, query)
        conn.rollback()
        assert conn.execute("SELECT 42").fetchone() == (42,)


def test_a_statement_that_is_no_copy_is_refused(database_url: str) -> None:
    with psycopg.connect(database_url) as conn:
        with pytest.raises(psycopg.OperationalError):
            _copy_out(conn, b"SELECT 1")
        assert conn.execute("SELECT 42").fetchone() == (42,)


def test_split_fetch_reads_both_halves_in_one_snapshot(database_url: str) -> None:
    rows = [attempt_row(span_id=i.to_bytes(8, "big"), end_ns=BASE_NS + i) for i in range(40)]
    with raw_transaction(database_url) as conn:
        write_attempts(conn, rows)
    with raw_transaction(database_url) as conn:
        begin_repeatable_read(conn)
        facts = fetch_run_facts(conn, "run-a")  # the snapshot is taken here
        # Committed after the snapshot, in the half the helper connection reads.
        with raw_transaction(database_url) as writer:
            write_attempts(writer, [attempt_row(end_ns=BASE_NS + 35, span_id=b"\xee" * 8)])
        split = fetch_run_attempts(conn, "run-a", split_url=database_url)
        whole = fetch_run_attempts(conn, "run-a")
    assert facts is not None and facts.attempts == 40
    assert split.height == 40
    assert split.sort("end_ns").equals(whole.sort("end_ns"))
    assert split.get_column("end_ns").sort().to_list() == [BASE_NS + i for i in range(40)]


def test_ids_are_hex_even_when_the_server_prints_bytea_escaped(database_url: str) -> None:
    # Ids are read as bytea output; the fetch sets the hex format for its transaction.
    rows = [attempt_row(span_id=b"\x00\x01ab\xfe\xff\x7f\x80", parent_span_id=b"\\" * 8)]
    with raw_transaction(database_url) as conn:
        write_attempts(conn, rows)
    with raw_transaction(database_url) as conn:
        conn.execute("SET bytea_output = 'escape'")
        frame = fetch_run_attempts(conn, "run-a")
    assert frame.get_column("span_id").to_list() == ["00016162feff7f80"]
    assert frame.get_column("parent_span_id").to_list() == ["5c" * 8]
    assert frame.get_column("trace_id").str.contains("^[0-9a-f]{32}$").all()


def test_the_plain_fetch_gives_the_frame_the_compiled_parser_gives(database_url: str) -> None:
    """While the worker's kernels compile, reads go through an ordinary fetch: same frame."""
    from psycopg import sql

    from tpmledger import compiled_kernels
    from tpmledger.storage.readers.attempt_frames import copy_select
    from tpmledger.storage.readers.live_window import LIVE_WINDOW_KINDS, _columns

    rows = [
        attempt_row(
            span_id=bytes([i]) * 8,
            call_id=text,
            model=None if i == 1 else text,
            error_type=text,
            queue_wait_s=0.1 * (i + 1) if i else None,
            ttft_s=1e-7 * (i + 3),
            resend_count=i if i != 2 else None,
            end_ns=BASE_NS + i,
        )
        for i, text in enumerate(AWKWARD)
    ]
    with raw_transaction(database_url) as conn:
        write_attempts(conn, rows)
    select = _columns("w").replace("{table}", "attempts")
    query = sql.SQL(f"SELECT {select} WHERE w.run_id = {{run_id}} ORDER BY w.end_ns").format(
        run_id=sql.Literal("run-a")
    )
    with raw_transaction(database_url) as conn:
        compiled = copy_select(conn, query, LIVE_WINDOW_KINDS)
        compiled_kernels.compiling()
        try:
            plain = copy_select(conn, query, LIVE_WINDOW_KINDS)
            empty = copy_select(
                conn, sql.SQL(f"{query.as_string(conn)} LIMIT 0"), LIVE_WINDOW_KINDS
            )
        finally:
            compiled_kernels.ready()
    assert compiled.height == 4
    assert plain.equals(compiled, null_equal=True) and plain.schema == compiled.schema
    assert empty.height == 0 and empty.schema == compiled.schema
