"""The reseal loop and the ``tpmledger serve analytics`` process."""

from __future__ import annotations

import itertools
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


def _final_versions(url: str, run_id: str) -> list[tuple[int, bool, int]]:
    with raw_transaction(url) as conn:
        rows = conn.execute(
            "SELECT version, final, events_count FROM snapshots WHERE run_id = %s ORDER BY version",
            (run_id,),
        ).fetchall()
    return [(int(v), bool(f), int(n)) for v, f, n in rows]


def test_a_run_waiting_out_a_retry_after_is_not_sealed_final_meanwhile(database_url: str) -> None:
    """Every slot of a quota-bound fleet was answered 429 with Retry-After and waits it out,
    so nothing arrives for longer than the quiet period; the worker must not seal the run
    final meanwhile (issue 37: the demo's cap-32 run was sealed final five times)."""
    quiet_s, wait_s = 1.0, 4.0
    now = time.time_ns()
    served = [
        attempt_row(run_id="w-quota", start_ns=now - 3 * SECOND, end_ns=now - 2 * SECOND)
        for _ in range(3)
    ]
    limited = [
        attempt_row(
            run_id="w-quota",
            start_ns=now - SECOND // 2,
            end_ns=now,
            status="error",
            error_type="RateLimitError",
            http_status=429,
            retry_after_s=wait_s,
        )
        for _ in range(4)
    ]
    stored_at = time.monotonic()
    store(database_url, served + limited)
    loop = ResealLoop(database_url, quiet_s=quiet_s, in_process=True)
    while time.monotonic() - stored_at < wait_s - 0.5:  # quiet for far longer than quiet_s
        assert loop.poll_once() == []
        time.sleep(0.2)
    assert _final_versions(database_url, "w-quota") == []
    time.sleep(max(0.0, wait_s - (time.monotonic() - stored_at)))
    # The wait is over: the retries are answered and their spans arrive.
    retried = [
        attempt_row(
            run_id="w-quota",
            start_ns=now + int(wait_s * SECOND),
            end_ns=now + int((wait_s + 1) * SECOND),
            resend_count=1,
        )
        for _ in range(4)
    ]
    store(database_url, retried)
    assert _wait_for(lambda: loop.poll_once() == ["w-quota"], limit_s=30)
    # One version, final, holding every attempt: no final seal was followed by more data.
    assert _final_versions(database_url, "w-quota") == [(1, True, 11)]
    # The next quiet period is the plain one: the last attempts announced no wait.
    assert loop.poll_once() == []


def test_an_announced_wait_delays_the_final_seal_by_at_most_five_minutes(
    database_url: str,
) -> None:
    """A Retry-After of a day (a daily quota) holds the run back ANNOUNCED_WAIT_MAX_S at most."""
    from tpmledger.storage.readers.snapshots_read import (
        ANNOUNCED_WAIT_MAX_S,
        runs_due_for_checkpoint,
        runs_due_for_seal,
    )

    store(
        database_url,
        [attempt_row(run_id="w-day", http_status=429, status="error", retry_after_s=86_400.0)],
    )

    def quiet_since(seconds: float) -> tuple[bool, bool]:
        with raw_transaction(database_url) as conn:
            conn.execute(
                "UPDATE runs SET updated_at = now() - make_interval(secs => %s)"
                " WHERE run_id = 'w-day'",
                (seconds,),
            )
        due = [r for r, _ in in_one_snapshot(database_url, runs_due_for_seal, 10.0)]
        live = [r for r, *_ in in_one_snapshot(database_url, runs_due_for_checkpoint, 0.0, 10.0)]
        return "w-day" in due, "w-day" in live

    assert ANNOUNCED_WAIT_MAX_S == 300.0
    assert quiet_since(60.0) == (False, True)  # waiting: still live, checkpoints go on
    assert quiet_since(305.0) == (False, True)
    assert quiet_since(311.0) == (True, False)  # quiet_s after the longest wait honoured


@pytest.mark.slow
def test_a_quota_bound_fleet_is_sealed_final_once_after_its_wait(running_ingest: object) -> None:
    """The real simulator against its provider's quota: once the minute's tokens are spent,
    every call is answered 429 with Retry-After until the UTC minute resets, and the fleet
    sends nothing for longer than the quiet period. Its spans go through the OpenTelemetry
    SDK to a real ingest; the worker's reseal loop polls all along (quiet period 3 s) and
    must seal the run final once, after the fleet's last spans, never while it waits."""
    from tests.fixtures.servers import RunningIngest
    from tpmledger.simulator.config import LengthDistribution, ServerConfig, WorkloadConfig
    from tpmledger.simulator.fleet import FleetConfig, run_fleet

    assert isinstance(running_ingest, RunningIngest)
    url = running_ingest.database_url
    quiet_s = 3.0
    # Start early in a minute: about six calls spend the quota within ~15 s, then the
    # fleet waits ~35 s for the next window; it stops 5 s into that window.
    if time.time() % 60 > 10:
        time.sleep(60 - time.time() % 60 + 0.5)
    config = FleetConfig(
        run_id="w-fleet",
        otlp_endpoint=running_ingest.http_url,
        shards=1,
        concurrency=1,
        duration_s=60 - time.time() % 60 + 5,
        workload=WorkloadConfig(
            prompt_tokens=LengthDistribution(median=40, sigma=0.1, maximum=60),
            max_completion_tokens=LengthDistribution(median=40, sigma=0.1, maximum=60),
            stream_share=0.0,
        ),
        server=ServerConfig(quota_tpm=400, error_rate=0.0, timeout_rate=0.0),
    )
    stop = threading.Event()
    sealed_during: list[list[str]] = []
    loop = ResealLoop(url, quiet_s=quiet_s, in_process=True)

    def poll() -> None:
        while not stop.is_set():
            sealed_during.append(loop.poll_once())
            stop.wait(0.5)

    poller = threading.Thread(target=poll)
    poller.start()
    try:
        result = run_fleet(config)
    finally:
        stop.set()
        poller.join(timeout=60)
    assert result.complete == {0} and result.total.calls_ok > 0
    assert not any(sealed_during), "sealed while the fleet was still running"
    with raw_transaction(url) as conn:
        ends = [int(e) for (e,) in conn.execute(
            "SELECT end_ns FROM attempts WHERE run_id = 'w-fleet' ORDER BY end_ns"
        )]  # fmt: skip
        waits = conn.execute(
            "SELECT count(*) FROM attempts WHERE run_id = 'w-fleet' AND retry_after_s > 10"
        ).fetchone()
    # The spans show the pause: a gap far longer than the quiet period, announced by 429s.
    gap_s = max(b - a for a, b in itertools.pairwise(ends)) / SECOND
    assert gap_s > quiet_s + 10, gap_s
    assert waits is not None and waits[0] > 0
    assert _wait_for(lambda: loop.poll_once() == ["w-fleet"], limit_s=120)
    assert _final_versions(url, "w-fleet") == [(1, True, len(ends))]
