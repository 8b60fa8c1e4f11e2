"""Runs joined with their latest snapshot, and the live / sealed status rule."""

from __future__ import annotations

import pytest

from tests.dashboard.builders import seed_sealed_run
from tests.dashboard.lifecycle_builders import seed_unsealed_run
from tpmledger.dashboard.data.run_records import (
    list_sweep_ids,
    load_run,
    load_runs,
    load_sweep_runs,
)
from tpmledger.storage.server.database import in_one_snapshot


def test_sealed_live_and_unsealed_runs_get_their_status(database_url: str) -> None:
    sealed = seed_sealed_run(database_url, "run-old", shards=3)
    seed_sealed_run(database_url, "run-now", live=True)
    seed_unsealed_run(database_url, "run-new")

    runs = {r.run_id: r for r in in_one_snapshot(database_url, load_runs)}

    assert {r: runs[r].status for r in runs} == {
        "run-old": "sealed",
        "run-now": "live",  # ingest stored data after the snapshot was computed
        "run-new": "live",  # never sealed
    }
    old = runs["run-old"]
    assert old.observed_shards == 3
    assert old.snapshot is not None and old.snapshot.seal == sealed.seal
    assert old.metrics["peak_minute"] == sealed.metrics["peak_minute"]
    assert runs["run-new"].snapshot is None and runs["run-new"].metrics == {}


def test_load_run_reads_the_newest_snapshot_version(database_url: str) -> None:
    seed_sealed_run(database_url, "run-a")
    run = in_one_snapshot(database_url, load_run, "run-a")
    assert run is not None and run.snapshot is not None
    assert run.snapshot.version == 1
    assert run.first_event_utc == "2026-02-01T03:44:00.000Z"
    assert in_one_snapshot(database_url, load_run, "nope") is None


def test_sweep_runs_are_found_by_sweep_id(database_url: str) -> None:
    seed_sealed_run(database_url, "s-8", sweep_id="sw", cap=8)
    seed_sealed_run(database_url, "s-4", sweep_id="sw", cap=4)
    seed_sealed_run(database_url, "other")
    assert in_one_snapshot(database_url, list_sweep_ids) == ["sw"]
    assert [r.run_id for r in in_one_snapshot(database_url, load_sweep_runs, "sw")] == [
        "s-4",
        "s-8",
    ]


@pytest.mark.slow
def test_a_checkpoint_keeps_the_run_live_and_a_rebase_is_shown(database_url: str) -> None:
    from tests.analytics.proofs.test_version_consistency import _calls
    from tests.analytics.seeding import store
    from tests.storage.builders import BASE_NS, MINUTE_NS
    from tpmledger.analytics.seal.sealing import seal_run
    from tpmledger.dashboard.components.provenance_panel import covers_text, rebase_text

    store(database_url, _calls(range(5)))
    seal_run(database_url, "grow", end_before_ns=BASE_NS + 3 * MINUTE_NS)
    run = in_one_snapshot(database_url, load_run, "grow", live_figures=False)
    assert run is not None and run.snapshot is not None
    assert run.is_live and not run.covered  # the open minutes are not in the checkpoint
    assert covers_text(run.snapshot).startswith("closed minutes through 2026-02-01T03:46:00Z")
    assert run.snapshot.rebased is None

    seal_run(database_url, "grow")
    store(database_url, _calls(range(1, 2), second=30))  # late: 03:45 was sealed
    seal_run(database_url, "grow")
    run = in_one_snapshot(database_url, load_run, "grow", live_figures=False)
    assert run is not None and run.snapshot is not None and run.covered
    assert covers_text(run.snapshot) == "every minute, through 2026-02-01T03:48:00Z"
    assert run.snapshot.rebased is not None
    assert run.snapshot.late_minutes == [{"minute_utc": "2026-02-01T03:45:00Z", "late_attempts": 1}]
    assert rebase_text(run.snapshot.rebased, run.snapshot.late_minutes) == (
        "1 attempt arrived after version 2 sealed their minutes "
        "(2026-02-01T03:45:00Z: 1); this version rebased "
        "2026-02-01T03:45:00Z (no consistency proof across it)"
    )
