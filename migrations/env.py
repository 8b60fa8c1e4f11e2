"""Alembic environment: the URL comes from the config that storage.server.migrate builds."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from tpmledger.storage.schema.models import Base
from tpmledger.storage.server.database import sqlalchemy_url

config = context.config
target_metadata = Base.metadata


def run_migrations_offline() -> None:
    context.configure(
        url=sqlalchemy_url(config.get_main_option("sqlalchemy.url") or ""),
        target_metadata=target_metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    url = sqlalchemy_url(config.get_main_option("sqlalchemy.url") or "")
    connectable = create_engine(url, poolclass=pool.NullPool)
    with connectable.connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata)
        with context.begin_transaction():
            context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
