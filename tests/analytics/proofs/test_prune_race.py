"""Prunes at once never destroy an archive (docs/operations.md#retention-and-archives).

Issue 41 reproduction: a second ``tpmledger prune`` started 1.5 s after the first reused
each run's folder, opened its event file for writing before checking anything, streamed
0 events (the first had deleted them) and left an empty ``events.jsonl.gz`` in place of
the archive: acknowledged spans were in neither the archive nor the database. Here two
command-line prunes and the analytics worker's scheduled retention run at once, round
after round, and every span is accounted for: in the database, or in an archive that
verifies (and ``tpmledger verify RUN`` checks that archive).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.analytics.proofs.test_run_archive import arrived_days_ago
from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.analytics.proofs.verification import verify_run
from tpmledger.analytics.seal.run_computation import in_seal_view
from tpmledger.analytics.worker import RetentionSchedule
from tpmledger.provenance.signing_keys import load_or_create_signing_key
from tpmledger.provenance.summary_verify import verify_archive
from tpmledger.settings import Settings
from tpmledger.storage.server.database import raw_transaction

SECOND = 1_000_000_000
RUNS_PER_ROUND = 4
SPANS_PER_RUN = 300
ROUNDS = int(os.environ.get("TPMLEDGER_PRUNE_RACE_ROUNDS", "3"))


def _stored(url: str, run_id: str) -> int:
    with raw_transaction(url) as conn:
        row = conn.execute("SELECT count(*) FROM attempts WHERE run_id = %s", (run_id,)).fetchone()
    return int(row[0]) if row else 0


def _archive_of(url: str, run_id: str) -> Path | None:
    with raw_transaction(url) as conn:
        row = conn.execute(
            "SELECT archive_dir FROM runs WHERE run_id = %s AND archived_at IS NOT NULL",
            (run_id,),
        ).fetchone()
    return Path(row[0]) if row else None


def _prune_command(env: dict[str, str], archive: Path) -> subprocess.Popen[bytes]:
    code = "import sys; from tpmledger.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.Popen(
        [sys.executable, "-c", code, "prune", "--older-than", "30d", "--archive-dir", str(archive)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.slow
def test_two_prunes_and_the_workers_retention_at_once_lose_nothing(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    archive = tmp_path / "archive"
    settings = Settings(
        database_url=database_url, retention="30d", data_dir=data, archive_dir=archive
    )
    load_or_create_signing_key(settings)  # one key for all three, made before they start
    env = dict(
        os.environ,
        TPMLEDGER_DATABASE_URL=database_url,
        TPMLEDGER_DATA_DIR=str(data),
        PYTHONPATH=os.pathsep.join(sys.path),
    )
    chance = random.Random(41)
    every_run: list[str] = []
    exits: list[tuple[int, str]] = []
    for round_no in range(ROUNDS):
        runs = [f"race-{round_no}-{i}" for i in range(RUNS_PER_ROUND)]
        for run_id in runs:
            store(
                database_url,
                [
                    attempt_row(
                        run_id=run_id,
                        start_ns=BASE_NS + k * SECOND,
                        end_ns=BASE_NS + (k + 1) * SECOND,
                    )
                    for k in range(SPANS_PER_RUN)
                ],
            )
            arrived_days_ago(database_url, run_id, 40)
        every_run += runs
        first = _prune_command(env, archive)
        schedule = RetentionSchedule(settings)
        schedule.next_at = 0.0
        worker = threading.Thread(target=schedule.run_if_due)
        time.sleep(chance.uniform(0.0, 1.5))
        worker.start()
        time.sleep(chance.uniform(0.0, 1.5))
        second = _prune_command(env, archive)
        for process in (first, second):
            _, err = process.communicate(timeout=300)
            exits.append((process.returncode, err.decode()))
        worker.join(timeout=300)
        assert not worker.is_alive()

    # Every span accounted for: each run's archive verifies and holds all of its spans;
    # tpmledger verify RUN checks that archive.
    for run_id in every_run:
        folder = _archive_of(database_url, run_id)
        if folder is None:  # not archived: its spans must all still be stored
            assert _stored(database_url, run_id) == SPANS_PER_RUN, run_id
            continue
        assert _stored(database_url, run_id) == 0, run_id
        checked = verify_archive(folder)
        assert checked.ok, (run_id, [c for c in checked.checks if not c.ok])
        lines = gzip.decompress((folder / "events.jsonl.gz").read_bytes()).splitlines()
        assert len(lines) == SPANS_PER_RUN
        assert {json.loads(line)["run_id"] for line in lines} == {run_id}
        assert in_seal_view(database_url, verify_run, run_id).ok
    # No half-written folder is left behind; every folder there verifies.
    leftovers = sorted(p.name for p in archive.iterdir() if p.name.startswith("."))
    assert not leftovers
    assert all(verify_archive(p).ok for p in archive.iterdir())
    # And every run was archived: each prune either did the work or waited for the other.
    assert all(_archive_of(database_url, run_id) is not None for run_id in every_run)
    assert all(code == 0 for code, _ in exits), exits


def test_verify_of_an_archived_run_checks_its_archive(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tpmledger verify RUN`` printed OK for a run whose archive was an empty file."""
    from tpmledger.analytics.proofs.run_archive import prune

    data = tmp_path / "data"
    settings = Settings(database_url=database_url, data_dir=data)
    key = load_or_create_signing_key(settings)
    store(
        database_url,
        [attempt_row(run_id="gone", start_ns=BASE_NS, end_ns=BASE_NS + SECOND) for _ in range(5)],
    )
    arrived_days_ago(database_url, "gone", 40)
    [outcome] = prune(database_url, 30 * 86_400, tmp_path / "archive", key).runs
    assert outcome.action == "archived"
    assert in_seal_view(database_url, verify_run, "gone").ok
    events = Path(outcome.archive_dir) / "events.jsonl.gz"
    events.write_bytes(gzip.compress(b""))  # what the racing prune left
    report = in_seal_view(database_url, verify_run, "gone")
    assert not report.ok
    assert any(m.field == "events digest" for m in report.mismatches)


@pytest.mark.slow
def test_an_existing_verified_archive_is_kept_and_never_rewritten(
    database_url: str, tmp_path: Path
) -> None:
    """An earlier prune put its verified archive in place, then its delete did not commit
    (the database went away): the next prune keeps that folder byte for byte and deletes
    the spans it holds."""
    from tpmledger.analytics.proofs import run_archive

    settings = Settings(database_url=database_url, data_dir=tmp_path / "data")
    key = load_or_create_signing_key(settings)
    store(
        database_url,
        [attempt_row(run_id="again", start_ns=BASE_NS, end_ns=BASE_NS + SECOND) for _ in range(7)],
    )
    arrived_days_ago(database_url, "again", 40)
    archive = tmp_path / "archive"

    def commit_fails(*args: Any) -> int:
        before_commit = args[-1]
        before_commit()  # the archive goes into place, then the commit fails
        raise OSError("the database went away")

    original = run_archive.delete_archived_spans
    run_archive.delete_archived_spans = commit_fails  # type: ignore[assignment]
    try:
        [first] = run_archive.prune(database_url, 30 * 86_400, archive, key).runs
    finally:
        run_archive.delete_archived_spans = original  # type: ignore[assignment]
    assert first.action.startswith("kept")
    folder = Path(first.archive_dir)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}
    [second] = run_archive.prune(database_url, 30 * 86_400, archive, key).runs
    assert second.action == "archived" and second.rows_deleted == 7
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.iterdir()}
    assert after == before
    assert sorted(p.name for p in archive.iterdir()) == [folder.name]
