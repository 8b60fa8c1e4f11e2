"""An export or an archive that needs a seal runs it in a process of its own: the exporting
or archiving process only streams the event file (docs/provenance.md#streaming-seal)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.analytics.proofs.test_run_archive import arrived_days_ago
from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.analytics.seal import seal_process, sealing
from tpmledger.analytics.seal.seal_process import SealFailed, seal_in_own_process
from tpmledger.cli.main import main
from tpmledger.storage.readers.snapshots_read import latest_snapshot
from tpmledger.storage.server.database import in_one_snapshot

SECOND = 1_000_000_000


def _store_run(url: str, run_id: str) -> None:
    store(
        url,
        [
            attempt_row(
                run_id=run_id,
                start_ns=BASE_NS + i * 7 * SECOND,
                end_ns=BASE_NS + (i * 7 + 2) * SECOND,
            )
            for i in range(20)
        ],
    )


@pytest.fixture
def no_seal_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any seal in the test's own process fails the test."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("sealed in the exporting or archiving process")

    monkeypatch.setattr(sealing, "seal_run", refuse)
    monkeypatch.setattr(sealing, "seal_unless_current", refuse)


@pytest.mark.slow
def test_export_and_prune_of_unsealed_runs_seal_in_a_child_process(
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_seal_here: None,
) -> None:
    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", database_url)
    monkeypatch.setenv("TPMLEDGER_DATA_DIR", str(tmp_path / "data"))
    _store_run(database_url, "exported")
    _store_run(database_url, "archived")
    arrived_days_ago(database_url, "archived", 40)

    code = main(["summary", "export", "exported", "--out", str(tmp_path / "export")])
    _, err = capsys.readouterr()
    assert code == 0, err
    sealed = in_one_snapshot(database_url, latest_snapshot, "exported")
    assert sealed is not None and sealed.version == 1  # sealed, by the child
    assert (tmp_path / "export" / "events.jsonl").stat().st_size > 0

    archive = tmp_path / "archive"
    code = main(["prune", "--older-than", "30d", "--archive-dir", str(archive), "--json"])
    out, err = capsys.readouterr()
    actions = {r["run_id"]: r["action"] for r in json.loads(out)["runs"]}
    assert code == 0, err
    assert actions == {"archived": "archived"}
    assert in_one_snapshot(database_url, latest_snapshot, "archived") is not None


def test_a_run_sealed_final_starts_no_child(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _store_run(database_url, "quiet")
    sealing.seal_run(database_url, "quiet")  # final: nothing arrives after it

    def no_child(*args: object, **kwargs: object) -> None:
        raise AssertionError("a child process was started")

    monkeypatch.setattr(subprocess, "run", no_child)
    assert seal_in_own_process(database_url, "quiet") is False
    with pytest.raises(AssertionError, match="child process"):
        seal_in_own_process(database_url, "quiet", even_if_current=True)


@pytest.mark.slow
def test_the_childs_failure_comes_back_with_its_kind(database_url: str) -> None:
    day = 86_400 * SECOND
    store(
        database_url,
        [
            attempt_row(run_id="too-long", start_ns=BASE_NS, end_ns=BASE_NS + SECOND),
            attempt_row(run_id="too-long", start_ns=BASE_NS + 40 * day, end_ns=BASE_NS + 40 * day),
        ],
    )
    with pytest.raises(SealFailed) as failed:
        seal_in_own_process(database_url, "too-long")
    assert failed.value.kind == "RunTooLong"
    assert str(failed.value).startswith("RunTooLong: ")
    assert "\n" not in failed.value.message


@pytest.mark.slow
def test_the_url_goes_to_the_child_by_environment_not_argument(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _store_run(database_url, "argv")
    seen: dict[str, object] = {}
    real_run = subprocess.run

    def watch(command: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        seen["command"] = command
        return real_run(command, **kwargs)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(seal_process.subprocess, "run", watch)
    assert seal_in_own_process(database_url, "argv") is True
    command = seen["command"]
    assert isinstance(command, list) and database_url not in " ".join(command)
