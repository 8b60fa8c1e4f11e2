import pytest
from sqlalchemy import inspect

from tpmledger.storage.server import migrate
from tpmledger.storage.server.database import get_engine


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


def test_models_and_migrations_agree(database_url: str, on_citus: bool) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from tpmledger.storage.schema.models import Base
    from tpmledger.storage.server.distribution import TABLE_ROLES

    # On Citus a unique key without run_id is swapped for one with it
    # (storage/server/distribution.py).
    swapped = {n for r in TABLE_ROLES for u in r.unique for n in (u.name, u.citus_name)}
    with get_engine(database_url).connect() as conn:
        diffs = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    if on_citus:
        diffs = [d for d in diffs if not (d[0].endswith("_constraint") and d[1].name in swapped)]
    assert diffs == []
