"""Ingest's writer as PostgreSQL shows it: the live loop's sign of a saturated ingest."""

from __future__ import annotations

import psycopg

from tpmledger.storage.server.database import connect_raw, libpq_url
from tpmledger.storage.server.ingest_activity import INGEST_WRITER, ingest_writing


def test_a_writer_inside_a_transaction_is_writing_and_an_idle_one_is_not(
    database_url: str,
) -> None:
    watcher = psycopg.connect(libpq_url(database_url), autocommit=True)
    writer = connect_raw(database_url, application_name=INGEST_WRITER)
    other = connect_raw(database_url, application_name="someone-else")
    try:
        assert not ingest_writing(watcher)  # connected, idle
        with other.transaction():
            other.execute("SELECT 1")
            assert not ingest_writing(watcher)  # another application's transaction
        with writer.transaction():
            writer.execute("SELECT 1")
            assert ingest_writing(watcher)  # between the statements of a commit
        assert not ingest_writing(watcher)  # committed
    finally:
        for conn in (watcher, writer, other):
            conn.close()


def test_the_group_commit_writer_names_its_connection(database_url: str) -> None:
    from tpmledger.ingest.group_commit import GroupCommitWriter

    writer = GroupCommitWriter(database_url)
    conn = writer._connect(database_url)
    try:
        name = conn.execute("SELECT current_setting('application_name')").fetchone()
        assert name == (INGEST_WRITER,)
    finally:
        conn.close()
