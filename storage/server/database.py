"""Engines and the one transaction boundary.

Handlers never call ``commit()``: they run inside :func:`transaction` (ORM session)
or :func:`raw_transaction` (a psycopg connection for COPY), which commit on a clean
exit and roll back on any exception.

Engines (docs/architecture.md#database-access): one pooled engine per database URL, made
on first use by :func:`get_engine`, and owned by the entry point running when it was made
(a command, a service, the seal's child process): the entry point runs inside
:func:`owned_engines`, which disposes every engine made during it on the way out, so no
pooled connection outlives the command or the service that opened it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from threading import Lock
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import psycopg
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

T = TypeVar("T")


def sqlalchemy_url(url: str) -> str:
    """Any ``postgres://`` / ``postgresql://`` URL as a ``postgresql+psycopg://`` URL."""
    parsed = make_url(url)
    if parsed.drivername in ("postgres", "postgresql", "postgresql+psycopg2"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


@dataclass(frozen=True)
class RoleBounds:
    """How long one background role's statements may run and wait for a lock (seconds)."""

    statement_s: float
    lock_s: float


#: Background roles and their bounds (docs/operations.md#bounded-queries). A live update
#: reads a page of minutes per statement; a seal or a prune reads a range of minutes per
#: statement (a 2.7 M-attempt seal's longest took well under a minute). Without bounds one
#: run-away live query ran 75 minutes while the live updater's DELETE and prune's
#: ``SELECT … FOR UPDATE`` queued behind it, and ingest's commits behind them. Ingest's
#: COPY is not bounded: its commit must not fail half-way through a large group.
ROLE_BOUNDS = {
    "live": RoleBounds(statement_s=120.0, lock_s=30.0),
    "seal": RoleBounds(statement_s=600.0, lock_s=60.0),
    "prune": RoleBounds(statement_s=600.0, lock_s=60.0),
}


def role_url(url: str, role: str) -> str:
    """``url`` with the libpq ``options`` that bound ``role``'s statements and lock waits
    (``statement_timeout``, ``lock_timeout``) and an ``application_name`` that names it in
    ``pg_stat_activity``. Every connection made from the returned URL carries them."""
    bounds = ROLE_BOUNDS[role]
    parsed = make_url(url)
    given = parsed.query.get("options")
    options = " ".join(
        [
            *([given] if isinstance(given, str) else list(given or ())),
            f"-c statement_timeout={int(bounds.statement_s * 1000)}",
            f"-c lock_timeout={int(bounds.lock_s * 1000)}",
        ]
    )
    query = {"options": options, "application_name": f"tpmledger-{role}"}
    return parsed.update_query_dict(query).render_as_string(hide_password=False)


def libpq_url(url: str) -> str:
    """The same database as a plain libpq URL, for psycopg and command-line tools."""
    parsed = make_url(url).set(drivername="postgresql")
    base = parsed.set(query={}).render_as_string(hide_password=False)
    if not parsed.query:
        return base
    # libpq decodes %XX but not "+" (SQLAlchemy writes a space in a query value as "+").
    pairs = [
        (key, value)
        for key, values in parsed.query.items()
        for value in (values if isinstance(values, tuple) else (values,))
    ]
    return f"{base}?{urlencode(pairs, quote_via=quote)}"


_engines: dict[str, Engine] = {}  # by URL, in the order they were made
_engines_lock = Lock()


def get_engine(url: str) -> Engine:
    """The pooled engine of ``url``, made on first use; the entry point running it owns it
    (:func:`owned_engines` disposes it)."""
    with _engines_lock:
        engine = _engines.get(url)
        if engine is None:
            engine = create_engine(
                sqlalchemy_url(url), pool_pre_ping=True, pool_size=5, max_overflow=5
            )
            _engines[url] = engine
        return engine


def _same_database(a: str, b: str) -> bool:
    """Both URLs name the same database of the same server (options such as a role's
    bounds or ``application_name`` aside)."""
    left, right = make_url(sqlalchemy_url(a)), make_url(sqlalchemy_url(b))
    return left.set(query={}) == right.set(query={})


def dispose_engines(url: str | None = None, *, keep: frozenset[str] = frozenset()) -> int:
    """Dispose and forget the engines of ``url``'s database (every role's), or every engine
    but those in ``keep``: their pooled connections close. Returns how many."""
    with _engines_lock:
        chosen = [
            key for key in _engines if key not in keep and (url is None or _same_database(key, url))
        ]
        engines = [_engines.pop(key) for key in chosen]
    for engine in engines:
        engine.dispose()
    return len(engines)


@contextmanager
def owned_engines() -> Iterator[None]:
    """Run an entry point: every engine made while it runs (in any of its threads) is
    disposed when it ends, however it ends. Engines made before are left to their owner."""
    with _engines_lock:
        before = frozenset(_engines)
    try:
        yield
    finally:
        dispose_engines(keep=before)


def _session_factory(url: str) -> sessionmaker[Session]:
    return sessionmaker(get_engine(url), expire_on_commit=False)


@contextmanager
def transaction(url: str) -> Iterator[Session]:
    """An ORM session that commits on exit and rolls back on error."""
    with _session_factory(url).begin() as session:
        yield session


@contextmanager
def read_session(url: str) -> Iterator[Session]:
    """A session for reads only; it never commits."""
    with _session_factory(url)() as session:
        yield session


@contextmanager
def read_view(url: str) -> Iterator[Session]:
    """A read-only session whose queries all see one snapshot of the database
    (REPEATABLE READ): what an API answer or a page composes from several reads. The
    storage read functions take it as their first argument."""
    with _session_factory(url)() as session:
        session.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY"))
        yield session


def in_one_snapshot(url: str, compose: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``compose(session, *args, **kwargs)`` inside one :func:`read_view`: what an entry
    point (an API answer run in a thread pool, a command) calls with a database URL."""
    with read_view(url) as session:
        return compose(session, *args, **kwargs)


@contextmanager
def raw_transaction(url: str, *, connect_timeout: float = 5.0) -> Iterator[psycopg.Connection]:
    """A fresh psycopg connection in one transaction: commit on exit, rollback on error."""
    with (
        psycopg.connect(
            libpq_url(url), connect_timeout=int(connect_timeout), client_encoding="UTF8"
        ) as conn,
        conn.transaction(),
    ):
        yield conn


def connect_raw(
    url: str, *, connect_timeout: float = 5.0, application_name: str | None = None
) -> psycopg.Connection:
    """A long-lived psycopg connection for a writer loop; use with :func:`in_transaction`.
    ``application_name`` names it in ``pg_stat_activity`` (else the URL's or ``PGAPPNAME``)."""
    conninfo = libpq_url(url)
    if application_name:
        conninfo = psycopg.conninfo.make_conninfo(conninfo, application_name=application_name)
    return psycopg.connect(conninfo, connect_timeout=int(connect_timeout), client_encoding="UTF8")


def driver_connection(session: Session) -> psycopg.Connection:
    """The psycopg connection under ``session``, in the session's transaction (for the
    storage functions that COPY or read over psycopg)."""
    driver = session.connection().connection.driver_connection
    if not isinstance(driver, psycopg.Connection):
        raise TypeError("this read runs over psycopg (3) connections only")
    return driver


@contextmanager
def in_transaction(conn: psycopg.Connection) -> Iterator[psycopg.Connection]:
    """One transaction on a long-lived connection: commit on exit, rollback on error."""
    with conn.transaction():
        yield conn
