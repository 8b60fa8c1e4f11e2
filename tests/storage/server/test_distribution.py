"""The Citus layout (storage/server/distribution.py): run against a coordinator
(``TPMLEDGER_TEST_ADMIN_URL``); on single-node PostgreSQL migration 0020 changes nothing."""

from __future__ import annotations

import pytest
from sqlalchemy import inspect, text

from tpmledger.storage.server import migrate
from tpmledger.storage.server.database import get_engine
from tpmledger.storage.server.distribution import ANCHOR, TABLE_ROLES, distributed_tables


def test_every_table_has_a_role(database_url: str) -> None:
    """A new table needs its line in TABLE_ROLES (what it becomes on Citus)."""
    tables = set(inspect(get_engine(database_url)).get_table_names()) - {"alembic_version"}
    assert tables == {role.table for role in TABLE_ROLES}


def test_single_node_is_unchanged(database_url: str, on_citus: bool) -> None:
    if on_citus:
        pytest.skip("single-node PostgreSQL only")
    with get_engine(database_url).connect() as conn:
        pk = conn.execute(
            text(
                "SELECT array_agg(a.attname::text ORDER BY a.attnum) FROM pg_index i "
                "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
                "WHERE i.indrelid = 'attempts'::regclass AND i.indisprimary"
            )
        ).scalar()
    assert pk == ["trace_id", "span_id"]
    assert migrate.distribute(database_url) == {}


@pytest.mark.citus
def test_per_run_tables_are_colocated_with_the_attempts(database_url: str) -> None:
    with get_engine(database_url).connect() as conn:
        rows = conn.execute(
            text(
                "SELECT logicalrelid::regclass::text, partmethod, "
                "column_to_column_name(logicalrelid, partkey), colocationid "
                "FROM pg_dist_partition"
            )
        ).all()
        spread = conn.execute(
            text(
                "SELECT count(DISTINCT nodeport) FROM pg_dist_shard_placement p "
                "JOIN pg_dist_shard s USING (shardid) WHERE s.logicalrelid = 'attempts'::regclass"
            )
        ).scalar()
    found = {name: (method, column, group) for name, method, column, group in rows}
    anchor_group = found[ANCHOR][2]
    for role in TABLE_ROLES:
        method, column, group = found[role.table]
        if role.role == "reference":
            assert method == "n", role.table
            continue
        assert (method, column) == ("h", role.column), role.table
        assert (group == anchor_group) == role.colocated, role.table
    assert spread == 2  # both workers hold shards of the attempts


@pytest.mark.citus
def test_distributing_again_changes_nothing(database_url: str) -> None:
    before = migrate.distribute(database_url)
    assert (
        before
        == {role.table: role.role for role in TABLE_ROLES}
        == distributed_tables(get_engine(database_url).connect())
    )
    assert migrate.distribute(database_url) == before


def test_migrate_distributed_refuses_a_server_without_citus(
    empty_database_url: str,
    on_citus: bool,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tpmledger.cli.main import main

    if on_citus:
        pytest.skip("the server has Citus")
    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", empty_database_url)
    assert main(["migrate", "--distributed"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --distributed: this server cannot load Citus")
    assert "docs/operations.md#scaling-out" in err and len(err.splitlines()) == 1
    assert migrate.current_revision(empty_database_url) is None


@pytest.mark.citus
def test_migrate_distributed_on_a_coordinator(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tpmledger.cli.main import main

    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", empty_database_url)
    assert main(["migrate", "--distributed"]) == 0
    out = capsys.readouterr().out
    reference = sum(1 for role in TABLE_ROLES if role.role == "reference")
    assert f"citus: {len(TABLE_ROLES) - reference} distributed tables, {reference} reference" in out
