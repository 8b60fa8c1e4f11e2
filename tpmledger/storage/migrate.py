"""Run Alembic migrations programmatically (``tpmledger migrate``, ``/readyz``)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

import tpmledger.migrations as migrations
from tpmledger.storage.database import get_engine


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    # ConfigParser interpolation would choke on '%' in passwords.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("postgresql://")).get_current_head()


def current_revision(url: str) -> str | None:
    with get_engine(url).connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def is_at_head(url: str) -> bool:
    return current_revision(url) == head_revision()
