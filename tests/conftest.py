"""Shared fixtures: a real PostgreSQL for the whole session, a fresh database per test.

With ``TPMLEDGER_TEST_ADMIN_URL`` (or ``TPMLEDGER_DATABASE_URL``) set, that server is
used; otherwise an embedded server from the ``pgserver`` wheel is started. A template
database is migrated once; each test gets a clone of it (CREATE DATABASE … TEMPLATE).
When that server is a Citus coordinator, every database is made on each of its workers
too (tests/fixtures/citus_nodes.py) and the tests marked ``citus`` run; elsewhere they
are skipped.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy.engine import make_url

from tests.fixtures import citus_nodes
from tpmledger.storage.server import migrate
from tpmledger.storage.server.database import dispose_engines, libpq_url

pytest_plugins = ["tests.fixtures.servers", "tests.fixtures.fault_servers"]

TEMPLATE = "tpmledger_test_template"

# Property tests get no per-example deadline: the first example of a test that calls a Numba
# kernel pays its compile (or the bounds-checked lane's slower code), and on a shared machine a
# deadline measures the machine, not a bug (timed assertions are not how this suite measures).
from hypothesis import settings  # noqa: E402 - the profile applies to every test module

settings.register_profile("tpmledger", deadline=None)
settings.load_profile("tpmledger")


def _database_url(server_url: str, name: str) -> str:
    return make_url(server_url).set(database=name).render_as_string(hide_password=False)


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """URL of a PostgreSQL server (its ``postgres`` database) for this test session."""
    external = os.environ.get("TPMLEDGER_TEST_ADMIN_URL") or os.environ.get(
        "TPMLEDGER_DATABASE_URL"
    )
    if external:
        yield external
        return
    from tpmledger.storage.server.embedded_postgres import (
        remove_throwaway_server,
        throwaway_server,
    )

    # Outside pytest's basetemp: pytest prunes old basetemps, and a concurrent pytest
    # session doing so would pull the data directory from under a running server.
    root = Path(tempfile.mkdtemp(prefix="tpmledger-test-pg-"))
    # The servers' sockets go in a short folder of its own: pgserver puts them under
    # XDG_RUNTIME_DIR, and a Unix socket path holds at most 107 bytes, which a deep TMPDIR
    # (scripts/test.sh gives each run one) would pass.
    runtime = Path(tempfile.mkdtemp(prefix="tl-run-", dir="/tmp"))  # mode 0700
    os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime))
    server = throwaway_server(root / "pgdata")
    try:
        yield str(server.get_uri("postgres"))
    finally:
        remove_throwaway_server(server)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)


def _admin(url: str) -> psycopg.Connection:
    return psycopg.connect(libpq_url(url), autocommit=True)


_CITUS_WORKERS: dict[str, list[tuple[str, int]] | None] = {}


def citus_workers(pg_server_url: str) -> list[tuple[str, int]] | None:
    """The workers when the test server is a Citus coordinator, else None (asked once)."""
    if pg_server_url not in _CITUS_WORKERS:
        _CITUS_WORKERS[pg_server_url] = citus_nodes.citus_workers(pg_server_url)
    return _CITUS_WORKERS[pg_server_url]


@pytest.fixture(scope="session")
def on_citus(pg_server_url: str) -> bool:
    """True when the tests run against a Citus coordinator."""
    return citus_workers(pg_server_url) is not None


@pytest.fixture(autouse=True)
def _citus_only(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("citus") and not request.getfixturevalue("on_citus"):
        pytest.skip("needs TPMLEDGER_TEST_ADMIN_URL to be a Citus coordinator")


@pytest.fixture(scope="session")
def template_database(pg_server_url: str) -> Iterator[str]:
    workers = citus_workers(pg_server_url)
    if workers is not None:
        # A cluster is shared by whoever points at it: one template per test session.
        name = f"{TEMPLATE}_{os.getpid()}"
        citus_nodes.drop_database(pg_server_url, workers, name)
        citus_nodes.create_database(pg_server_url, workers, name, None)
    else:
        name = TEMPLATE
        with _admin(pg_server_url) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {name}")
    url = _database_url(pg_server_url, name)
    migrate.upgrade(url)
    dispose_engines(url)
    yield name
    if workers is not None:
        citus_nodes.drop_database(pg_server_url, workers, name)


def create_test_database(pg_server_url: str, template: str | None) -> str:
    """A new, empty database (a clone of the migrated template when given); returns its URL."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    workers = citus_workers(pg_server_url)
    if workers is not None:
        citus_nodes.create_database(pg_server_url, workers, name, template)
        return _database_url(pg_server_url, name)
    with _admin(pg_server_url) as conn:
        if template:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
        else:
            conn.execute(f"CREATE DATABASE {name}")
    return _database_url(pg_server_url, name)


def drop_test_database(pg_server_url: str, url: str) -> None:
    dispose_engines(url)
    name = make_url(url).database
    workers = citus_workers(pg_server_url)
    if workers is not None and name:
        citus_nodes.drop_database(pg_server_url, workers, name)
        return
    with _admin(pg_server_url) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def database_url(pg_server_url: str, template_database: str) -> Iterator[str]:
    """A fresh database at the newest migration, dropped after the test."""
    url = create_test_database(pg_server_url, template_database)
    try:
        yield url
    finally:
        drop_test_database(pg_server_url, url)


@pytest.fixture
def empty_database_url(pg_server_url: str) -> Iterator[str]:
    """A fresh database with no schema at all (for migration tests)."""
    url = create_test_database(pg_server_url, None)
    try:
        yield url
    finally:
        drop_test_database(pg_server_url, url)


@pytest.fixture
def output_dir(request: pytest.FixtureRequest) -> Path:
    """A per-test folder under ``test-output/`` for screenshots and artefacts kept after the run."""
    root = Path(__file__).resolve().parent.parent / "test-output"
    path = root / request.node.name.replace("/", "_").replace("[", "_").replace("]", "")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Release what the suite still holds while the interpreter is whole, then let Python
    finalize as usual: a crash at exit fails the run (issue 40; no ``os._exit``).

    The pooled engines of every test database are disposed, leftovers are collected, and any
    thread still alive is named on stderr: a native thread running during interpreter
    finalization is the usual cause of a crash at exit. ``scripts/test.sh`` sets
    ``PYTHONFAULTHANDLER``, so such a crash prints every thread's stack.
    """
    import gc
    import sys
    import threading

    from tpmledger.storage.server.database import dispose_engines

    dispose_engines()
    gc.collect()
    alive = [t for t in threading.enumerate() if t is not threading.main_thread()]
    if alive:
        names = ", ".join(f"{t.name} (daemon={t.daemon})" for t in alive)
        print(f"tests/conftest.py: threads alive at exit: {names}", file=sys.stderr)
