"""Which database a command uses: the running `tpmledger up`'s, named on stderr; a read
never creates one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tpmledger.cli.database_option import (
    clear_running,
    record_running,
    running_data_dir,
    running_data_dirs,
    running_record,
)
from tpmledger.cli.main import main


@pytest.fixture
def no_database_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("TPMLEDGER_DATA_DIR", "TPMLEDGER_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "default-data"))
    return tmp_path


def _record_of_another_up(data_dir: Path) -> None:
    """A record as another live ``up`` process (our parent: alive) writes it."""
    path = running_record(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pid": os.getppid(), "data_dir": str(data_dir.resolve())}))


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as ended:
        return int(ended.code or 0)


@pytest.mark.slow
def test_commands_use_the_running_up_data_dir_and_say_so(
    no_database_settings: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = no_database_settings / "up-data"
    assert main(["migrate", "--data-dir", str(data_dir)]) == 0  # as `up` creates it
    record_running(data_dir)  # as `tpmledger up --data-dir up-data` does while it runs
    assert running_data_dir() == data_dir.resolve()
    assert main(["runs"]) == 0
    captured = capsys.readouterr()
    assert f"using the embedded database in {data_dir.resolve()}" in captured.err
    assert not (no_database_settings / "default-data" / "tpmledger").exists()
    clear_running(data_dir)
    assert running_data_dir() is None


def test_a_read_never_creates_a_database(
    no_database_settings: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = no_database_settings / "empty"
    for argv in (["runs"], ["verify", "r"], ["analyze", "r"], ["events", "r"]):
        assert _exit_code([*argv, "--data-dir", str(empty)]) == 2
        err = capsys.readouterr().err
        assert f"no tpmledger database in {empty}" in err
        assert "--data-dir" in err and "TPMLEDGER_DATABASE_URL" in err
    assert not (empty / "postgres").exists()
    # Nothing running, no flag: the default directory, which is not created either.
    assert _exit_code(["runs"]) == 2
    assert "no tpmledger database in" in capsys.readouterr().err
    assert not (no_database_settings / "default-data" / "tpmledger" / "postgres").exists()


def test_two_ups_keep_two_records(no_database_settings: Path) -> None:
    first, second = no_database_settings / "a", no_database_settings / "b"
    record_running(first)
    _record_of_another_up(second)  # the second `up` does not overwrite the first's record
    assert running_data_dirs() == sorted([first.resolve(), second.resolve()])
    clear_running(first)
    assert running_data_dirs() == [second.resolve()]
    assert running_data_dir() == second.resolve()  # the only one running


def test_the_default_directory_wins_over_other_ups(
    no_database_settings: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    default = no_database_settings / "default-data" / "tpmledger"
    _record_of_another_up(no_database_settings / "other")
    _record_of_another_up(default)
    assert running_data_dir() == default.resolve()


def test_several_ups_and_no_default_say_which_and_how_to_choose(
    no_database_settings: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second = no_database_settings / "a", no_database_settings / "b"
    _record_of_another_up(first)
    _record_of_another_up(second)
    assert _exit_code(["runs"]) == 2
    err = capsys.readouterr().err
    assert str(first.resolve()) in err and str(second.resolve()) in err
    assert "--data-dir" in err and "TPMLEDGER_DATABASE_URL" in err
    assert not (first / "postgres").exists() and not (second / "postgres").exists()


def test_a_stale_record_is_ignored(no_database_settings: Path) -> None:
    record = running_record(Path("/nowhere"))
    record.parent.mkdir(parents=True)
    dead = max(os.getpid() * 10, 4_000_000)  # no such process
    record.write_text(json.dumps({"pid": dead, "data_dir": "/nowhere"}))
    assert running_data_dir() is None


def test_data_dir_help_states_the_rule(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["verify", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "running `tpmledger up`" in out and "never creates a database" in out
