"""Background roles' statements and lock waits are bounded (storage/server/database.py role_url)."""

from __future__ import annotations

import time

import psycopg
import pytest
from sqlalchemy import text

from tpmledger.storage.server import database
from tpmledger.storage.server.database import (
    ROLE_BOUNDS,
    RoleBounds,
    get_engine,
    libpq_url,
    raw_transaction,
    read_view,
    role_url,
)


@pytest.mark.parametrize("role", sorted(ROLE_BOUNDS))
def test_every_connection_of_a_role_carries_its_bounds(database_url: str, role: str) -> None:
    url = role_url(database_url, role)
    bounds = ROLE_BOUNDS[role]
    expected = (str(int(bounds.statement_s * 1000)), str(int(bounds.lock_s * 1000)))
    shown = (
        "SELECT (SELECT setting FROM pg_settings WHERE name = 'statement_timeout'),"
        " (SELECT setting FROM pg_settings WHERE name = 'lock_timeout')"
    )
    with psycopg.connect(libpq_url(url)) as conn:  # raw psycopg (COPY, live updater)
        assert conn.execute(shown).fetchone() == expected
    with read_view(url) as session:  # SQLAlchemy sessions (reseal loop, prune)
        assert tuple(session.execute(text(shown)).one()) == expected
        name = session.execute(text("SELECT current_setting('application_name')")).scalar()
        assert name == f"tpmledger-{role}"
    get_engine(url).dispose()
    # The plain URL (ingest's) is not bounded.
    with psycopg.connect(libpq_url(database_url)) as conn:
        assert conn.execute("SHOW statement_timeout").fetchone() == ("0",)


def test_a_lock_wait_ends_at_the_bound_instead_of_queueing(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the live updater's DELETE and prune's FOR UPDATE did for 13 and 7 minutes."""
    monkeypatch.setitem(database.ROLE_BOUNDS, "live", RoleBounds(statement_s=5, lock_s=0.5))
    with psycopg.connect(libpq_url(database_url)) as holder:
        holder.execute("LOCK TABLE live_dirty IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        with (
            pytest.raises(psycopg.errors.LockNotAvailable),
            raw_transaction(role_url(database_url, "live")) as conn,
        ):
            conn.execute("DELETE FROM live_dirty")
        assert time.monotonic() - started < 3


def test_a_run_away_statement_is_cancelled_at_the_bound(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(database.ROLE_BOUNDS, "seal", RoleBounds(statement_s=0.5, lock_s=0.5))
    with (
        pytest.raises(psycopg.errors.QueryCanceled),
        raw_transaction(role_url(database_url, "seal")) as conn,
    ):
        conn.execute("SELECT pg_sleep(30)")


def test_given_options_are_kept() -> None:
    url = role_url("postgresql://u@/db?options=-c%20work_mem%3D64MB", "live")
    options = psycopg.conninfo.conninfo_to_dict(libpq_url(url))["options"]
    assert options.startswith("-c work_mem=64MB -c statement_timeout=")
