"""Checkpoints seal the closed minutes of a run that is still receiving data."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from tests.analytics.proofs.test_version_consistency import _calls
from tests.analytics.seeding import store
from tpmledger.analytics.seal import sealing
from tpmledger.analytics.seal.checkpoints import Checkpointer, closed_before
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.storage.readers.snapshots_read import latest_snapshot
from tpmledger.storage.server.database import in_one_snapshot, libpq_url
from tpmledger.storage.writers.snapshot_store import sealing_claim

# The calls of _calls end in minutes 03:44 .. 03:48 of 2026-02-01.
NOW = datetime(2026, 2, 1, 3, 50, 30, tzinfo=UTC)  # 03:48 ended 90 s ago: still open


def test_minutes_close_a_fixed_time_after_they_end() -> None:
    assert closed_before(NOW, 120) == datetime(2026, 2, 1, 3, 48, tzinfo=UTC)
    assert closed_before(NOW, 0) == datetime(2026, 2, 1, 3, 50, tzinfo=UTC)


def test_a_live_run_gets_a_checkpoint_of_its_closed_minutes_once(database_url: str) -> None:
    store(database_url, _calls(range(5)))
    checkpoints = Checkpointer(
        database_url, every_s=0, quiet_s=3600, close_after_s=120, in_process=True
    )  # the worker's child process: test_a_checkpoint_is_sealed_in_a_child_process_…
    [result] = checkpoints.poll_once(now=NOW)
    assert result.run_id == "grow" and not result.final
    assert result.document["minutes"]["tree_size"] == 4  # 03:44 .. 03:47
    assert result.document["minutes"]["through_minute_utc"] == "2026-02-01T03:47:00Z"
    # Nothing closed since: no new version, even with no waiting between checkpoints.
    assert checkpoints.poll_once(now=NOW) == []
    # A minute later 03:48 is closed too.
    later = NOW.replace(minute=51)
    [extended] = checkpoints.poll_once(now=later)
    assert extended.document["minutes"]["tree_size"] == 5


def test_a_new_runs_first_checkpoint_waits_one_interval(database_url: str) -> None:
    """A backfill's minutes are all closed at once: its first checkpoint comes one
    interval after the run's first commit, not while its commits still arrive (issue 39:
    the seal competed with ingest, and the rest of the backfill rebased it at once)."""
    store(database_url, _calls(range(5)))
    checkpoints = Checkpointer(
        database_url, every_s=300, quiet_s=3600, close_after_s=120, in_process=True
    )
    assert checkpoints.poll_once(now=NOW) == []
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        conn.execute("UPDATE runs SET created_at = now() - interval '301 seconds'")
    [result] = checkpoints.poll_once(now=NOW)
    assert result.document["minutes"]["tree_size"] == 4
    # The next one, an interval after this version.
    assert checkpoints.poll_once(now=NOW.replace(minute=51)) == []


def test_a_run_that_stopped_receiving_data_gets_no_checkpoint(database_url: str) -> None:
    store(database_url, _calls(range(5)))
    assert (
        Checkpointer(database_url, every_s=0, quiet_s=0, close_after_s=120).poll_once(now=NOW) == []
    )


@pytest.mark.slow
def test_a_checkpoint_exports_and_verifies_after_the_run_grew(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tpmledger.cli.main import main
    from tpmledger.provenance.summary_verify import verify_export

    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", database_url)
    monkeypatch.setenv("TPMLEDGER_DATA_DIR", str(tmp_path / "data"))
    store(database_url, _calls(range(5)))
    [checkpoint] = Checkpointer(database_url, every_s=0, quiet_s=3600, close_after_s=120).poll_once(
        now=NOW
    )
    store(database_url, _calls(range(5, 7)))  # the fleet keeps going
    final = seal_run(database_url, "grow")
    out = tmp_path / "v1"
    assert (
        main(["summary", "export", "grow", "--version", str(checkpoint.version), "--out", str(out)])
        == 0
    )
    report = verify_export(out)
    assert report.ok, report.checks
    proofs = json.loads((out / "minute-proofs.json").read_text())
    assert proofs["merkle_root"] == checkpoint.document["minutes"]["merkle_root"]
    assert proofs["tree_size"] == 4
    assert f"snapshot_version: {checkpoint.version}" in (out / "SUMMARY.txt").read_text()
    assert (
        main(
            [
                "summary",
                "prove-consistency",
                "grow",
                "--from",
                str(checkpoint.version),
                "--to",
                str(final.version),
            ]
        )
        == 0
    )
    assert main(["summary", "export", "grow", "--version", "99", "--out", str(tmp_path / "x")]) == 1


@pytest.mark.slow
def test_a_checkpoint_is_sealed_in_a_child_process_under_the_claim(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Any seal in this (the worker's) process fails: the seal path refuses to compute.
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("sealed in the worker's own process")

    monkeypatch.setattr(sealing, "compute_for_sealing", refuse)
    store(database_url, _calls(range(5)))
    checkpoints = Checkpointer(database_url, every_s=0, quiet_s=3600, close_after_s=120)
    with sealing_claim(database_url, "grow") as claimed:  # a replica is sealing it
        assert claimed
        assert checkpoints.poll_once(now=NOW) == []
    [result] = checkpoints.poll_once(now=NOW)
    assert result.run_id == "grow" and not result.final and result.created
    assert result.document["minutes"]["through_minute_utc"] == "2026-02-01T03:47:00Z"
    assert in_one_snapshot(database_url, latest_snapshot, "grow") is not None
