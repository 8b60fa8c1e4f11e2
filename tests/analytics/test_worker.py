"""The reseal loop and the ``tpmledger serve analytics`` process."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.analytics.seal import sealing
from tpmledger.analytics.worker import ResealLoop, run
from tpmledger.settings import Settings
from tpmledger.storage.readers.snapshots_read import list_snapshots
from tpmledger.storage.server.database import in_one_snapshot, raw_transaction

SECOND = 1_000_000_000


def _rows(run_id: str, n: int, offset: int = 0) -> list[tuple[object, ...]]:
    return [
        attempt_row(
            run_id=run_id,
            start_ns=BASE_NS + (offset + i) * SECOND,
            end_ns=BASE_NS + (offset + i) * SECOND + SECOND,
        )
        for i in range(n)
    ]


def _wait_for(predicate: object, limit_s: float = 60.0) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def test_new_data_makes_a_new_version_linked_to_the_previous_seal(database_url: str) -> None:
    store(database_url, _rows("w1", 5))
    loop = ResealLoop(database_url, quiet_s=0, in_process=True)  # the child: below
    assert loop.poll_once() == ["w1"]
    assert loop.poll_once() == []  # nothing new
    store(database_url, _rows("w1", 3, offset=100))
    assert loop.poll_once() == ["w1"]
    versions = in_one_snapshot(database_url, list_snapshots, "w1")
    assert [v["version"] for v in versions] == [1, 2]
    assert versions[1]["previous_seal"] == versions[0]["seal"]
    assert versions[1]["events_count"] == 8


def test_quiet_period_defers_a_live_run(database_url: str) -> None:
    store(database_url, _rows("w2", 5))
    assert ResealLoop(database_url, quiet_s=3600).poll_once() == []
    assert in_one_snapshot(database_url, list_snapshots, "w2") == []


@pytest.mark.slow
def test_run_stops_when_told(database_url: str) -> None:
    store(database_url, _rows("w3", 4))
    settings = Settings(database_url=database_url, analytics_poll_s=0.05, reseal_quiet_s=0)
    stop = threading.Event()
    worker = threading.Thread(target=run, args=(settings, stop))
    worker.start()
    try:
        assert _wait_for(lambda: in_one_snapshot(database_url, list_snapshots, "w3"))
    finally:
        stop.set()
        worker.join(timeout=30)
    assert not worker.is_alive()


@pytest.mark.slow
def test_serve_analytics_seals_and_exits_cleanly_on_sigterm(database_url: str) -> None:
    store(database_url, _rows("w4", 4))
    env = {
        **os.environ,
        "TPMLEDGER_DATABASE_URL": database_url,
        "TPMLEDGER_ANALYTICS_POLL_S": "0.1",
        "TPMLEDGER_RESEAL_QUIET_S": "0",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "tpmledger.cli.main", "serve", "analytics"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert _wait_for(lambda: in_one_snapshot(database_url, list_snapshots, "w4"))
        # Its connections carry their role's bounds (storage/server/database.py ROLE_BOUNDS).
        assert _wait_for(lambda: {"tpmledger-live", "tpmledger-seal"} <= _app_names(database_url))
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out.decode()
    assert b"sealed w4 v1" in out


def _app_names(url: str) -> set[str]:
    with raw_transaction(url) as conn:
        rows = conn.execute(
            "SELECT DISTINCT application_name FROM pg_stat_activity"
            " WHERE datname = current_database()"
        ).fetchall()
    return {str(name) for (name,) in rows}


@pytest.mark.slow
def test_a_provisional_snapshot_is_sealed_again_as_final_once_quiet(database_url: str) -> None:
    from tpmledger.analytics.seal.sealing import seal_run

    store(database_url, _rows("w9", 5))
    provisional = seal_run(database_url, "w9", quiet_s=3600)  # `analyze` while running
    assert not provisional.final
    assert ResealLoop(database_url, quiet_s=0).poll_once() == ["w9"]
    versions = in_one_snapshot(database_url, list_snapshots, "w9")
    assert [v["version"] for v in versions] == [1, 2]
    assert ResealLoop(database_url, quiet_s=0).poll_once() == []  # final now: nothing due


@pytest.mark.slow
def test_the_daily_prune_reports_a_bad_run_and_prunes_the_others(
    database_url: str, tmp_path: object
) -> None:
    from pathlib import Path

    from tests.analytics.proofs.test_run_archive import arrived_days_ago
    from tpmledger.analytics.worker import RetentionSchedule

    # "a-bad" spans 40 days: sealing it raises RunTooLong.
    store(database_url, [*_rows("a-bad", 1), *_rows("a-bad", 1, offset=40 * 86_400)])
    store(database_url, _rows("b-good", 3))
    for run_id in ("a-bad", "b-good"):
        arrived_days_ago(database_url, run_id, 40)
    data = Path(str(tmp_path))
    settings = Settings(database_url=database_url, retention="30d", data_dir=data)
    schedule = RetentionSchedule(settings)
    schedule.next_at = 0.0
    schedule.run_if_due()  # must not raise
    assert schedule.next_at > time.monotonic() + 3_600  # the next daily cycle retries it
    with raw_transaction(database_url) as conn:
        left = dict(conn.execute("SELECT run_id, count(*) FROM attempts GROUP BY run_id"))
    assert left == {"a-bad": 2}


@pytest.mark.slow
def test_the_reseal_loop_seals_in_a_child_process(
    database_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Any seal in this (the worker's) process fails: the seal path refuses to compute.
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("sealed in the worker's own process")

    monkeypatch.setattr(sealing, "compute_for_sealing", refuse)
    store(database_url, _rows("w-child", 5))
    # The seal's timings and the child's report are logged with -v (DEBUG) only.
    caplog.set_level(logging.DEBUG, logger="tpmledger.analytics")
    assert ResealLoop(database_url, quiet_s=0).poll_once() == ["w-child"]
    [version] = in_one_snapshot(database_url, list_snapshots, "w-child")
    assert version["events_count"] == 5
    [line] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("sealed w-child")]
    assert "5 attempts, child peak" in line and " MiB (" in line  # the child's report
    # At the default level the line says what was sealed, without seconds or stages.
    caplog.clear()
    caplog.set_level(logging.INFO, logger="tpmledger.analytics")
    store(database_url, _rows("w-child-2", 3))
    assert ResealLoop(database_url, quiet_s=0).poll_once() == ["w-child-2"]
    [quiet] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("sealed w-ch")]
    assert quiet.endswith(" events 3") and "child peak" not in quiet


def test_live_figures_come_while_the_kernels_still_compile(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The live loop starts before the kernel warm-up ends, and until then computes with
    no compiled code (issue 37: 85 s before the first live figure on a cold start)."""
    from tpmledger import compiled_kernels
    from tpmledger.analytics.kernels import group_quantiles, second_runs
    from tpmledger.storage.readers import attempt_frames

    class Uncompiled:  # calling a kernel now would compile (or load) it: refused
        def __init__(self, kernel: object) -> None:
            self.py_func = getattr(kernel, "py_func", None)

        def __call__(self, *args: object) -> object:
            raise AssertionError("a compiled kernel was called before the warm-up ended")

    monkeypatch.setattr(
        group_quantiles, "sorted_moments", Uncompiled(group_quantiles.sorted_moments)
    )
    monkeypatch.setattr(
        group_quantiles, "gather_by_group", Uncompiled(group_quantiles.gather_by_group)
    )
    monkeypatch.setattr(attempt_frames, "parse_binary_copy", Uncompiled(None))
    # The minute concurrency formula the live path shares with the seal (its runs and walk).
    monkeypatch.setattr(second_runs, "dense_runs", Uncompiled(second_runs.dense_runs))
    monkeypatch.setattr(second_runs, "run_minute_cells", Uncompiled(second_runs.run_minute_cells))
    seen: list[bool] = []

    def live_row() -> bool:
        with raw_transaction(database_url) as conn:
            row = conn.execute(
                "SELECT attempts FROM live_run_minutes WHERE run_id = 'w9'"
            ).fetchone()
        return row is not None and row[0] == 4

    def slow_warm_up() -> None:  # a cold cache: the child compiles for a long time
        seen.append(_wait_for(live_row, 60.0) and not compiled_kernels.kernels_ready())

    monkeypatch.setattr("tpmledger.analytics.worker.warm_in_child", slow_warm_up)
    store(database_url, _rows("w9", 4))
    settings = Settings(database_url=database_url, analytics_poll_s=0.05, reseal_quiet_s=3600)
    stop = threading.Event()
    worker = threading.Thread(target=run, args=(settings, stop))
    worker.start()
    try:
        assert _wait_for(lambda: bool(seen), 90.0)
        assert seen == [True]
        assert compiled_kernels.kernels_ready()  # once the warm-up is done
    finally:
        stop.set()
        worker.join(timeout=30)
        compiled_kernels.ready()
    assert not worker.is_alive()
