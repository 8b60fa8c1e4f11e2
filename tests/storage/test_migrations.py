import pytest
from sqlalchemy import inspect

from tpmledger.storage import migrate
from tpmledger.storage.database import get_engine


@pytest.mark.slow
def test_upgrade_creates_every_table_and_downgrade_removes_them(empty_database_url: str) -> None:
    migrate.upgrade(empty_database_url)
    assert migrate.is_at_head(empty_database_url)
    tables = set(inspect(get_engine(empty_database_url)).get_table_names())
    assert {"attempts", "runs", "ingest_tokens", "snapshots", "minute_metrics"} <= tables

    migrate.downgrade(empty_database_url, "base")
    get_engine(empty_database_url).dispose()
    left = set(inspect(get_engine(empty_database_url)).get_table_names()) - {"alembic_version"}
    assert left == set()
    assert migrate.current_revision(empty_database_url) is None

    migrate.upgrade(empty_database_url)
    assert migrate.is_at_head(empty_database_url)


def test_models_and_migrations_agree(database_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from tpmledger.storage.models import Base

    with get_engine(database_url).connect() as conn:
        assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
