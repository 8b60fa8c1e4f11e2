"""Run Alembic migrations programmatically (``tpmledger migrate``) and check a schema.

Only the embedded database is migrated automatically; against an external database
(``TPMLEDGER_DATABASE_URL``) every command and service but ``tpmledger migrate`` checks
the schema with :func:`check_schema` and refuses one behind or ahead of the code, changing
nothing (docs/configuration.md#schema-migrations): a newer CLI must never upgrade a shared
schema under older services still running against it.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError

import tpmledger.migrations as migrations
from tpmledger.storage.server.database import get_engine

MIGRATION_DOCS = "docs/configuration.md#schema-migrations"


class SchemaMismatch(RuntimeError):
    """The database schema is not the one this code was written for (one line: what to do)."""


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    # ConfigParser interpolation would choke on '%' in passwords.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def enable_citus(url: str) -> None:
    """``CREATE EXTENSION citus`` (``tpmledger migrate --distributed``); raises
    :class:`SchemaMismatch` with what to do when the server has no Citus."""
    from sqlalchemy import text
    from sqlalchemy.exc import DBAPIError

    try:
        with get_engine(url).begin() as conn:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS citus"))
    except DBAPIError as exc:
        reason = str(exc.orig).splitlines()[0] if exc.orig else str(exc)
        raise SchemaMismatch(
            f"--distributed: this server cannot load Citus ({reason}); install Citus and add "
            "it to shared_preload_libraries on the coordinator and every worker "
            "(docs/operations.md#scaling-out)"
        ) from exc


def distribute(url: str) -> dict[str, str]:
    """On a Citus coordinator, distribute whatever :mod:`storage.server.distribution` lists and
    is not distributed yet (an existing database migrated before Citus was added); returns
    every listed table's role there, empty on single-node PostgreSQL."""
    from tpmledger.storage.server.distribution import (
        distribute_tables,
        distributed_tables,
        is_citus,
    )

    with get_engine(url).begin() as conn:
        if not is_citus(conn):
            return {}
        distribute_tables(conn)
        return distributed_tables(conn)


def downgrade(url: str, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)


def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config("postgresql://"))


def head_revision() -> str | None:
    return _scripts().get_current_head()


def current_revision(url: str) -> str | None:
    with get_engine(url).connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def is_at_head(url: str) -> bool:
    return current_revision(url) == head_revision()


def schema_problem(url: str) -> str | None:
    """``None`` when the schema is this code's, else one line saying what is wrong and what
    to do. Reads ``alembic_version`` only; never writes."""
    head = head_revision()
    with get_engine(url).connect() as conn:
        heads = MigrationContext.configure(conn).get_current_heads()
    if heads == (head,):
        return None
    if not heads:
        return (
            "the database has no tpmledger schema yet: run `tpmledger migrate` against it "
            f"first ({MIGRATION_DOCS})"
        )
    known = _known(heads)
    shown = ", ".join(heads)
    if known:
        return (
            f"the database schema (revision {shown}) is behind this tpmledger (revision "
            f"{head}): run `tpmledger migrate`, after stopping or upgrading the services "
            f"that use it ({MIGRATION_DOCS})"
        )
    return (
        f"the database schema (revision {shown}) is ahead of this tpmledger (newest known "
        f"revision {head}): use the tpmledger release that migrated it; nothing was changed "
        f"({MIGRATION_DOCS})"
    )


def check_schema(url: str) -> None:
    """Raise :class:`SchemaMismatch` unless the schema is exactly this code's."""
    problem = schema_problem(url)
    if problem:
        raise SchemaMismatch(problem)


def is_ahead(url: str) -> bool:
    """True when the database holds a revision this code does not know (a newer release's)."""
    with get_engine(url).connect() as conn:
        heads = MigrationContext.configure(conn).get_current_heads()
    return bool(heads) and not _known(heads)


def _known(revisions: tuple[str, ...]) -> bool:
    scripts = _scripts()
    try:
        return all(scripts.get_revision(r) is not None for r in revisions)
    except CommandError:  # "No such revision or branch"
        return False
