"""Which database a command uses: the running `tpmledger up`'s, named on stderr."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tpmledger.cli.database_option import clear_running, record_running, running_data_dir
from tpmledger.cli.main import main


@pytest.fixture
def no_database_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("TPMLEDGER_DATA_DIR", "TPMLEDGER_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "default-data"))
    return tmp_path


def test_commands_use_the_running_up_data_dir_and_say_so(
    no_database_settings: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data_dir = no_database_settings / "up-data"
    record_running(data_dir)  # as `tpmledger up --data-dir up-data` does while it runs
    assert running_data_dir() == data_dir.resolve()
    assert main(["runs"]) == 0
    captured = capsys.readouterr()
    assert f"using the embedded database in {data_dir.resolve()}" in captured.err
    assert (data_dir / "postgres").is_dir()
    assert not (no_database_settings / "default-data" / "tpmledger").exists()
    clear_running()
    assert running_data_dir() is None


def test_a_stale_record_is_ignored(no_database_settings: Path) -> None:
    record = no_database_settings / "state" / "tpmledger" / "up.json"
    record.parent.mkdir(parents=True)
    dead = max(os.getpid() * 10, 4_000_000)  # no such process
    record.write_text(json.dumps({"pid": dead, "data_dir": "/nowhere"}))
    assert running_data_dir() is None
