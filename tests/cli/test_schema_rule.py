"""Only the embedded database migrates itself (docs/configuration.md#schema-migrations).

Against ``TPMLEDGER_DATABASE_URL`` every command and service but ``tpmledger migrate``
refuses a schema behind or ahead of the code with one line saying what to do, and
changes nothing.
"""

from __future__ import annotations

import subprocess
import sys

import psycopg
import pytest
from sqlalchemy import inspect

from tpmledger.cli.main import main
from tpmledger.storage.server import migrate
from tpmledger.storage.server.database import get_engine, libpq_url

# Each reads or writes the database; none may change its schema.
COMMANDS = [
    ["runs"],
    ["runs", "--json"],
    ["tokens", "list"],
    ["tokens", "create", "fleet"],
    ["analyze", "some-run"],
    ["verify", "some-run"],
    ["summary", "show", "some-run"],
    ["compare", "a", "b"],
    ["serve", "ingest"],
    ["serve", "analytics"],
    ["serve", "dashboard"],
]


def _schema(url: str) -> tuple[str | None, frozenset[str]]:
    get_engine(url).dispose()
    tables = frozenset(inspect(get_engine(url)).get_table_names())
    return migrate.current_revision(url), tables


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    captured = capsys.readouterr()
    # (analyze may first say that it compiles its kernels: a progress note, not the answer)
    lines = [x for x in captured.err.strip().splitlines() if not x.startswith("compiling")]
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert not captured.out
    return lines[0]


@pytest.fixture
def external(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", database_url)
    return database_url


@pytest.mark.slow
def test_a_schema_behind_the_code_is_refused_and_left_as_it_was(
    external: str, capsys: pytest.CaptureFixture[str]
) -> None:
    migrate.downgrade(external, "-1")
    before = _schema(external)
    assert before[0] != migrate.head_revision()
    for argv in COMMANDS:
        line = _refused(capsys, argv)
        assert "behind" in line and "run `tpmledger migrate`" in line, (argv, line)
        assert _schema(external) == before, argv
    up = subprocess.run(  # its own process: `up` installs signal handlers
        [sys.executable, "-m", "tpmledger.cli.main", "up", "--http-port", "0",
         "--grpc-port", "0", "--dashboard-port", "0"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert up.returncode == 2 and up.stderr.strip().startswith("error: the database schema")
    assert "run `tpmledger migrate`" in up.stderr and len(up.stderr.strip().splitlines()) == 1
    assert _schema(external) == before
    assert main(["migrate"]) == 0  # the one command that changes it
    assert migrate.is_at_head(external)
    assert main(["runs"]) == 0


@pytest.mark.slow
def test_a_schema_ahead_of_the_code_is_refused_and_left_as_it_was(
    external: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with psycopg.connect(libpq_url(external), autocommit=True) as conn:
        conn.execute("UPDATE alembic_version SET version_num = 'f00d_from_a_newer_release'")
    before = _schema(external)
    for argv in COMMANDS:
        line = _refused(capsys, argv)
        assert "ahead" in line and "f00d_from_a_newer_release" in line, (argv, line)
        assert _schema(external) == before, argv
    # Not even `migrate` touches a schema it does not know (it would be a downgrade).
    assert main(["migrate"]) == 2
    assert "ahead" in capsys.readouterr().err
    assert _schema(external) == before


def test_a_database_without_a_schema_is_refused(
    empty_database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", empty_database_url)
    assert "run `tpmledger migrate`" in _refused(capsys, ["runs"])
    assert _schema(empty_database_url) == (None, frozenset())
    assert main(["migrate"]) == 0
    assert main(["runs"]) == 0
