"""The live updater keeps per-minute state, not a busy minute's attempts (issue 29 item 3).

At 15,000 spans/s the worker held every attempt of the current minute and recomputed the
minute from them on every update. Now each update reads only the new commits' rows for a
minute it keeps state of, and the state holds two values per attempt (TTFT, latency),
no attempt rows; the figures stay the seal's, including late arrivals that change other
attempts' flags in minutes already folded.
"""

from __future__ import annotations

import os
import random
from typing import Any

import polars as pl
import pytest

from tests.analytics.live.test_live_minutes import _assert_same
from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.storage.server.backend_cpu import backend_cpu_s

SECOND = 1_000_000_000


def _busy_batch(run_id: str, rng: random.Random, count: int) -> list[tuple[Any, ...]]:
    """``count`` attempts ending in the run's first minute, some queued, some failed."""
    rows = []
    for _ in range(count):
        start = BASE_NS + int(rng.uniform(0, 50) * SECOND)
        ok = rng.random() < 0.9
        rows.append(
            attempt_row(
                run_id=run_id,
                shard_id=str(rng.randrange(4)),
                start_ns=start,
                end_ns=start + int(rng.uniform(0.1, 9) * SECOND),
                queue_wait_s=rng.choice((None, 0.5, 2.0)),
                ttft_s=rng.uniform(0.05, 1.0) if ok else None,
                status="ok" if ok else "error",
                error_type=None if ok else "timeout",
                prompt_tokens=rng.randint(10, 500),
            )
        )
    return rows


@pytest.mark.slow
def test_a_busy_minute_is_folded_from_the_new_rows_and_holds_no_attempt_rows(
    database_url: str,
) -> None:
    run_id = f"busy-{os.urandom(4).hex()}"
    rng = random.Random(29)
    updater = LiveUpdater(database_url)
    batch, batches = 1_500, 8
    for index in range(batches):
        store(database_url, _busy_batch(run_id, rng, batch))
        [update] = updater.update_once()
        if index:  # the minute's state is kept: only the new commit's rows are read
            assert update.attempts_read == batch, (index, update.attempts_read)
    # A late attempt into an older minute does not drop the busy minute's state.
    late = BASE_NS - 10 * 60 * SECOND
    store(database_url, [attempt_row(run_id=run_id, start_ns=late, end_ns=late + SECOND)])
    [update] = updater.update_once()
    assert update.attempts_read == 1
    store(database_url, _busy_batch(run_id, rng, batch))
    [update] = updater.update_once()
    assert update.attempts_read == batch
    batches += 1
    held = updater.states[run_id]
    assert not any(isinstance(v, pl.DataFrame) for v in vars(held).values())
    values, nbytes = updater.held_values(run_id)
    attempts = batch * batches + 1
    assert values <= 2 * attempts  # TTFT of successful attempts and latency of each
    assert nbytes <= 24 * attempts  # + the slot of attempts without a deadline of their own
    _assert_same(database_url, run_id, updater)


def test_late_arrivals_change_flags_in_minutes_already_folded(database_url: str) -> None:
    """A child arriving after its parent (the parent becomes a rollup), an earlier attempt
    of a call arriving after its later one (retry position and the call's last attempt
    change) and a late attempt into a folded minute: the live rows equal the seal's, and
    the folded minutes are corrected without being read whole again."""
    run_id = f"late-{os.urandom(4).hex()}"
    rng = random.Random(7)
    updater = LiveUpdater(database_url)
    parent = attempt_row(run_id=run_id, start_ns=BASE_NS + 5 * SECOND, end_ns=BASE_NS + 20 * SECOND)
    later = attempt_row(
        run_id=run_id,
        call_id="call-1",
        call_id_explicit=True,
        start_ns=BASE_NS + 70 * SECOND,
        end_ns=BASE_NS + 75 * SECOND,
        ttft_s=0.2,
    )
    store(database_url, [*_busy_batch(run_id, rng, 300), parent, later])
    updater.update_once()
    store(database_url, _busy_batch(run_id, rng, 300))
    updater.update_once()
    child = attempt_row(
        run_id=run_id,
        trace_id=parent[0],
        parent_span_id=parent[1],
        start_ns=BASE_NS + 6 * SECOND,
        end_ns=BASE_NS + 19 * SECOND,
        ttft_s=0.1,
    )
    earlier = attempt_row(
        run_id=run_id,
        call_id="call-1",
        call_id_explicit=True,
        start_ns=BASE_NS + 62 * SECOND,
        end_ns=BASE_NS + 68 * SECOND,
        status="error",
        error_type="rate_limit",
    )
    store(database_url, [child, earlier, *_busy_batch(run_id, rng, 50)])
    [update] = updater.update_once()
    # The parent and the later attempt are taken out with their old flags and put back
    # with their new ones: the busy minute is not read whole again (652 attempts). The
    # parent's minute (it and its child) is: the parent set its target's first second
    # there, a bound that cannot be taken away (analytics/live/minute_state.py).
    assert update.attempts_read <= 52 + 2 + 2, update.attempts_read
    _assert_same(database_url, run_id, updater)


def _spread_batch(
    run_id: str, rng: random.Random, count: int, serial: int
) -> list[tuple[Any, ...]]:
    """``count`` attempts ending all over the run's first hour (a backfill's commit), each
    its own explicit call but two, retries of calls of an earlier commit."""
    rows = []
    for index in range(count):
        start = BASE_NS + int(rng.uniform(0, 3_590) * SECOND)
        retry = serial and index < 2
        call = f"call-{rng.randrange(serial * count) if retry else serial * count + index}"
        rows.append(
            attempt_row(
                run_id=run_id,
                shard_id=str(index % 3),
                call_id=call,
                call_id_explicit=True,
                start_ns=start,
                end_ns=start + int(rng.uniform(0.1, 9) * SECOND),
                queue_wait_s=rng.choice((None, 0.5)),
                ttft_s=rng.uniform(0.05, 1.0),
                status="ok" if rng.random() < 0.9 else "error",
            )
        )
    return rows


def test_commits_touching_every_minute_of_an_hour_fold_only_their_rows(
    database_url: str,
) -> None:
    """A backfill: every commit touches all sixty minutes. Each update after the first
    reads only its commit's rows (no minute is read whole again), and the figures stay
    the seal's (issue 39: whole minutes were re-read for every commit)."""
    run_id = f"spread-{os.urandom(4).hex()}"
    rng = random.Random(39)
    updater = LiveUpdater(database_url)
    batch = 400
    for index in range(4):
        store(database_url, _spread_batch(run_id, rng, batch, index))
        [update] = updater.update_once()
        assert update.minutes >= 60
        if index:  # the new rows, the calls' earlier attempts refolded, their minutes
            assert update.attempts_read <= batch + batch // 5, (index, update.attempts_read)
    assert len(updater.states[run_id].minutes) >= 60
    _assert_same(database_url, run_id, updater)


def test_a_new_runs_first_update_folds_its_commits_rows_and_reads_no_minute_whole(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst folded once after it ends (the live loop waited for ingest): every row of
    the run is among the commits' rows, so its minutes start empty and take them; read
    again whole, they doubled the update's database work (issue 39). An updater that keeps
    nothing of a run with older rows (a restart) still reads its minutes whole."""
    from tpmledger.analytics.live.attempt_reader import AttemptReader

    run_id = f"burst-{os.urandom(4).hex()}"
    rng = random.Random(41)
    for index in range(3):
        store(database_url, _spread_batch(run_id, rng, 300, index))
    real_build = AttemptReader.build
    built: list[int] = []

    def build(reader: AttemptReader, states: dict[int, Any]) -> int:
        built.append(len(states))
        return real_build(reader, states)

    monkeypatch.setattr(AttemptReader, "build", build)
    updater = LiveUpdater(database_url)
    [update] = updater.update_once()
    assert built == [] and update.attempts_read == 900 and update.minutes >= 60
    _assert_same(database_url, run_id, updater)

    store(database_url, _spread_batch(run_id, rng, 300, 3))
    restarted = LiveUpdater(database_url)
    [update] = restarted.update_once()
    assert sum(built) >= 60 and update.attempts_read == 1_200
    _assert_same(database_url, run_id, restarted)


def _minute_batch(
    run_id: str, rng: random.Random, count: int, minute: int, serial: int
) -> list[tuple[Any, ...]]:
    """``count`` attempts ending in the run's ``minute`` (current traffic: a commit's rows
    end within a few seconds), each its own explicit call but the first, a retry of a
    call of the previous commit."""
    rows = []
    for index in range(count):
        end = BASE_NS + minute * 60 * SECOND + int(rng.uniform(0, 59) * SECOND)
        call = serial * count - 1 if serial and index == 0 else serial * count + index
        rows.append(
            attempt_row(
                run_id=run_id,
                shard_id=str(index % 3),
                call_id=f"call-{call}",
                call_id_explicit=True,
                start_ns=end - int(rng.uniform(0.1, 20) * SECOND),
                end_ns=end,
                ttft_s=rng.uniform(0.05, 1.0),
                status="ok" if rng.random() < 0.9 else "error",
            )
        )
    return rows


def test_a_minute_no_update_touched_starts_empty_and_takes_the_new_rows(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Current traffic moving into its next minute: the minute held no attempt before
    the commits that reach it, so it starts empty and takes their rows instead of being
    read whole (issue 39: a burst's next minute read its first ~10 s of rows a second
    time). A minute the updater let go of (the byte budget) is read whole when touched
    again, and so is every older one; the figures stay the seal's throughout."""
    from tpmledger.analytics.live import live_updater
    from tpmledger.analytics.live.attempt_reader import AttemptReader

    run_id = f"next-{os.urandom(4).hex()}"
    rng = random.Random(49)
    real_build = AttemptReader.build
    built: list[list[int]] = []

    def build(reader: AttemptReader, states: dict[int, Any]) -> int:
        built.append(sorted(states))
        return real_build(reader, states)

    monkeypatch.setattr(AttemptReader, "build", build)
    updater = LiveUpdater(database_url)
    for serial, minute in enumerate((0, 1, 2, 4)):
        store(database_url, _minute_batch(run_id, rng, 120, minute, serial))
        [update] = updater.update_once()
        assert built == [], (minute, built)
        # The new rows, and the earlier attempt of the one call retried.
        assert update.attempts_read <= 121, (minute, update.attempts_read)
    _assert_same(database_url, run_id, updater)
    assert built == []

    # Older minutes let go of (the byte budget at 0: the newest two, and minute 3 that
    # holds no value): touched again they are read whole, and so is a minute before them
    # that no update touched; a later one that none touched still starts empty.
    monkeypatch.setattr(live_updater, "KEPT_BYTES", 0)
    store(database_url, _minute_batch(run_id, rng, 40, 5, 4))
    updater.update_once()
    minute = 60 * SECOND
    assert min(updater.states[run_id].minutes) == BASE_NS + 3 * minute
    late = [*_minute_batch(run_id, rng, 30, 0, 0), *_minute_batch(run_id, rng, 5, -3, 0)]
    store(database_url, [*late, *_minute_batch(run_id, rng, 10, 8, 0)])
    updater.update_once()
    reread = {m for states in built for m in states}
    assert {BASE_NS, BASE_NS - 3 * minute} <= reread
    assert BASE_NS + 8 * minute not in reread
    _assert_same(database_url, run_id, updater)


def test_live_figures_before_the_kernels_are_compiled_are_the_seals(database_url: str) -> None:
    """While the analytics worker's kernels compile, the live path reads and computes
    without them (issue 37: no compilation before a run's first figures); the figures
    are the same."""
    from tpmledger import compiled_kernels

    run_id = f"cold-{os.urandom(4).hex()}"
    rng = random.Random(37)
    updater = LiveUpdater(database_url)
    compiled_kernels.compiling()
    try:
        for index in range(2):
            store(database_url, _spread_batch(run_id, rng, 200, index))
            [update] = updater.update_once()
            assert update.minutes >= 50
    finally:
        compiled_kernels.ready()
    _assert_same(database_url, run_id, updater)


def test_older_minute_states_are_kept_within_the_byte_budget() -> None:
    """The newest two minutes always; older ones newest first while their values fit in
    KEPT_BYTES (a busy minute alone does not: busy runs keep two, as before)."""
    import numpy as np

    from tpmledger.analytics.live.live_updater import KEPT_BYTES, _within_budget
    from tpmledger.analytics.live.minute_state import MinuteState
    from tpmledger.durations import MINUTE_NS

    third = KEPT_BYTES // 3 // 8 + 1  # int64 values: three such minutes exceed the budget
    states = {
        m * MINUTE_NS: MinuteState(m * MINUTE_NS, latency={"0": np.zeros(third, np.int64)})
        for m in range(10)
    }
    assert sorted(_within_budget(states)) == [m * MINUTE_NS for m in (6, 7, 8, 9)]
    busy = {
        m * MINUTE_NS: MinuteState(m * MINUTE_NS, latency={"0": np.zeros(KEPT_BYTES, np.int64)})
        for m in range(5)
    }
    assert sorted(_within_budget(busy)) == [3 * MINUTE_NS, 4 * MINUTE_NS]


def test_the_backend_cpu_an_update_used_is_read_on_a_local_server(database_url: str) -> None:
    """The live loop yields for the CPU an update used in PostgreSQL too (issue 39): on a
    server of this machine the backend's CPU is read from /proc; never negative."""
    run_id = f"backend-{os.urandom(4).hex()}"
    store(database_url, _spread_batch(run_id, random.Random(7), 200, 0))
    updater = LiveUpdater(database_url)
    [update] = updater.update_once()
    assert update.backend_cpu_s >= 0.0
    read = backend_cpu_s(updater.connection())
    if os.path.exists("/proc/self/stat"):  # Linux: the suite's PostgreSQL is local
        assert read is not None and read[0] == updater.connection().info.backend_pid
        assert read[1] >= 0.0
    updater.close()
