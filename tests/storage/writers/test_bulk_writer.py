from collections.abc import Callable, Sequence
from typing import Any

import psycopg
import pytest
from sqlalchemy import select

from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.storage.codecs.attempt_encoding import AttemptBlock, encode_attempts
from tpmledger.storage.schema.models import Attempt, Run
from tpmledger.storage.server.database import connect_raw, raw_transaction, read_session
from tpmledger.storage.writers.bulk_writer import (
    commit_attempt_blocks,
    write_attempt_blocks,
    write_attempts,
)

Store = Callable[[Sequence[AttemptBlock]], int]


@pytest.fixture(params=["in the caller's transaction", "committed by the writer"])
def store(request: pytest.FixtureRequest, database_url: str) -> Any:
    """Both write paths: write_attempt_blocks inside a transaction, and the group commit's
    commit_attempt_blocks on one long-lived connection (pipelined, no savepoint)."""
    if request.param == "in the caller's transaction":

        def in_transaction(blocks: Sequence[AttemptBlock]) -> int:
            with raw_transaction(database_url) as conn:
                return write_attempt_blocks(conn, blocks)

        yield in_transaction
        return
    conn = connect_raw(database_url)

    def committed(blocks: Sequence[AttemptBlock]) -> int:
        try:
            return commit_attempt_blocks(conn, blocks)
        finally:  # committed or rolled back, never left inside a transaction
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    yield committed
    conn.close()


def test_both_paths_store_idempotently_and_keep_runs_current(
    store: Store, database_url: str
) -> None:
    rows = [
        attempt_row(shard_id="0", end_ns=BASE_NS + 5),
        attempt_row(shard_id="1", end_ns=BASE_NS + 9),
        attempt_row(run_id="run-b", shard_id="7"),
    ]
    assert store([encode_attempts(rows[:2]), encode_attempts(rows[2:])]) == 3
    assert store([encode_attempts([*rows, rows[0]])]) == 0
    fresh = attempt_row(shard_id="2", end_ns=BASE_NS + 99 * 10**9)
    # One re-sent span sends the batch down the staging path; the new one still lands.
    assert store([encode_attempts([rows[1]]), encode_attempts([fresh, fresh])]) == 1
    assert store([encode_attempts([])]) == 0
    with read_session(database_url) as session:
        runs = {r.run_id: r for r in session.scalars(select(Run))}
    assert (runs["run-a"].attempts, runs["run-b"].attempts) == (3, 1)
    assert runs["run-a"].shard_ids == ["0", "1", "2"]
    assert (runs["run-a"].first_event_ns, runs["run-a"].last_event_ns) == (
        BASE_NS + 5,
        BASE_NS + 99 * 10**9,
    )
    with raw_transaction(database_url) as conn:
        # Read apart: a join of the two tables is not one Citus runs (attempts distributed).
        stored = conn.execute("SELECT count(*), count(DISTINCT ingest_batch) FROM attempts")
        batches = {b for (b,) in conn.execute("SELECT DISTINCT ingest_batch FROM attempts")}
        marked = {b for (b,) in conn.execute("SELECT DISTINCT batch_id FROM live_dirty")}
    # Every commit's rows carry its batch id, and its live marks name it (a commit of
    # re-sent spans only marks its minutes too).
    assert stored.fetchone() == (4, 2) and len(marked) == 3
    assert batches <= marked and None not in marked


def test_write_is_idempotent_and_keeps_runs_current(database_url: str) -> None:
    rows = [
        attempt_row(shard_id="0", end_ns=BASE_NS + 5),
        attempt_row(shard_id="1", end_ns=BASE_NS + 9),
        attempt_row(run_id="run-b", shard_id="7"),
    ]
    with raw_transaction(database_url) as conn:
        assert write_attempts(conn, rows) == 3
    with raw_transaction(database_url) as conn:
        assert write_attempts(conn, [*rows, rows[0]]) == 0  # re-send stores nothing twice

    with read_session(database_url) as session:
        assert session.scalar(select(Attempt).where(Attempt.shard_id == "7")) is not None
        runs = {r.run_id: r for r in session.scalars(select(Run))}
    assert runs["run-a"].attempts == 2
    assert runs["run-a"].shard_ids == ["0", "1"]
    assert runs["run-a"].first_event_ns == BASE_NS + 5
    assert runs["run-a"].last_event_ns == BASE_NS + 9
    assert runs["run-b"].attempts == 1


def test_failed_transaction_stores_nothing(database_url: str) -> None:
    rows = [attempt_row(), attempt_row()]
    try:
        with raw_transaction(database_url) as conn:
            write_attempts(conn, rows)
            raise RuntimeError("writer crashed before commit")
    except RuntimeError:
        pass
    with read_session(database_url) as session:
        assert session.scalars(select(Attempt)).all() == []


def test_batch_mixing_stored_and_new_spans_stores_only_the_new(database_url: str) -> None:
    first = [attempt_row(shard_id="0"), attempt_row(shard_id="1")]
    with raw_transaction(database_url) as conn:
        assert write_attempts(conn, first) == 2
    fresh = attempt_row(shard_id="2", end_ns=BASE_NS + 99 * 10**9)
    with raw_transaction(database_url) as conn:
        # One re-sent span sends the batch down the staging path; the new one still lands.
        assert write_attempts(conn, [first[1], fresh, fresh]) == 1
    with read_session(database_url) as session:
        assert len(session.scalars(select(Attempt)).all()) == 3
        run = session.get(Run, "run-a")
    assert run is not None
    assert run.attempts == 3
    assert run.shard_ids == ["0", "1", "2"]
    assert run.last_event_ns == BASE_NS + 99 * 10**9


def test_run_facts_from_the_fast_path(database_url: str) -> None:
    rows = [
        attempt_row(run_id="r", shard_id="b", end_ns=BASE_NS + 3, concurrency_cap=None),
        attempt_row(run_id="r", shard_id="a", end_ns=BASE_NS + 1, sweep_id="sw", concurrency_cap=8),
        attempt_row(run_id="r", shard_id="a", end_ns=BASE_NS + 2, declared_shard_count=None),
    ]
    with raw_transaction(database_url) as conn:
        assert write_attempts(conn, rows) == 3
    with raw_transaction(database_url) as conn:
        later = attempt_row(run_id="r", shard_id="c", end_ns=BASE_NS - 5, concurrency_cap=32)
        assert write_attempts(conn, [later]) == 1
    with read_session(database_url) as session:
        run = session.get(Run, "r")
    assert run is not None
    assert (run.first_event_ns, run.last_event_ns) == (BASE_NS - 5, BASE_NS + 3)
    assert run.shard_ids == ["a", "b", "c"]
    assert (run.declared_shard_count, run.sweep_id, run.attempts) == (8, "sw", 4)
    assert run.concurrency_cap == 32  # the newest batch's cap wins, as in the staging path


def _archive(url: str, run_id: str) -> None:
    with raw_transaction(url) as conn:
        conn.execute(
            "UPDATE runs SET archived_at = now(), archive_dir = '/archive/x' WHERE run_id = %s",
            (run_id,),
        )


def test_spans_of_an_archived_run_are_refused_and_counted(store: Store, database_url: str) -> None:
    gone = "gone\trun\\x"  # escaped in COPY text: refused all the same
    with raw_transaction(database_url) as conn:
        write_attempts(conn, [attempt_row(run_id=gone)])
    _archive(database_url, gone)
    block = encode_attempts(
        [attempt_row(run_id=gone), attempt_row(run_id="alive"), attempt_row(run_id=gone)]
    )
    assert store([block]) == 1
    assert block.refused_spans == 2 and "/archive/x" in block.refused[gone][1]
    with raw_transaction(database_url) as conn:
        counts = dict(conn.execute("SELECT run_id, count(*) FROM attempts GROUP BY run_id"))
        runs = dict(conn.execute("SELECT run_id, attempts FROM runs"))
    assert counts == {gone: 1, "alive": 1} and runs == {gone: 1, "alive": 1}


def test_a_run_archived_during_the_write_rolls_it_back(
    store: Store, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prune holds the runs row while it deletes; a commit that checked before the
    archive and upserts after it must not store the run's spans invisibly."""
    from tpmledger.storage.writers import bulk_writer

    with raw_transaction(database_url) as conn:
        write_attempts(conn, [attempt_row(run_id="racing")])
    block = encode_attempts([attempt_row(run_id="racing")])
    # The run is archived right after this commit's check found it was not.
    monkeypatch.setattr(bulk_writer, "_refuse", lambda *_: _archive(database_url, "racing"))
    with pytest.raises(bulk_writer.RunArchivedMeanwhile):
        store([block])
    with raw_transaction(database_url) as conn:
        [(count,)] = conn.execute("SELECT count(*) FROM attempts WHERE run_id = 'racing'")
    assert count == 1


@pytest.mark.parametrize("order", [(8, 32), (32, 8)])
def test_a_runs_cap_and_shard_count_are_the_largest_declared_in_any_order(
    database_url: str, order: tuple[int, int]
) -> None:
    """Issue 41: they followed the last commit (the same data in two orders gave 8 and 32)."""
    from tests.analytics.seeding import store
    from tests.storage.builders import attempt_row
    from tpmledger.storage.server.database import raw_transaction

    run_id = f"order-{order[0]}-{order[1]}"
    for declared in order:
        store(
            database_url,
            [attempt_row(run_id=run_id, concurrency_cap=declared, declared_shard_count=declared)],
        )
    store(
        database_url, [attempt_row(run_id=run_id, concurrency_cap=None, declared_shard_count=None)]
    )
    with raw_transaction(database_url) as conn:
        row = conn.execute(
            "SELECT concurrency_cap, declared_shard_count FROM runs WHERE run_id = %s", (run_id,)
        ).fetchone()
    assert row == (32, 32)


def test_a_runs_announced_wait_is_the_latest_end_plus_retry_after(database_url: str) -> None:
    """``runs.wait_until_ns``: how long the run's clients were told to wait, on both write
    paths (the fast COPY and the staging path a re-sent span takes)."""
    second = 10**9
    limited = attempt_row(end_ns=BASE_NS + 10 * second, http_status=429, retry_after_s=30.0)
    rows = [
        attempt_row(end_ns=BASE_NS + 20 * second),  # no Retry-After: no wait
        limited,
        attempt_row(end_ns=BASE_NS + 12 * second, http_status=429, retry_after_s=2.5),
    ]
    with raw_transaction(database_url) as conn:
        write_attempts(conn, rows)
        write_attempts(conn, [attempt_row(run_id="run-b")])
    with read_session(database_url) as session:
        run, plain = session.get(Run, "run-a"), session.get(Run, "run-b")
    assert run is not None and run.wait_until_ns == BASE_NS + 40 * second
    assert plain is not None and plain.wait_until_ns is None
    later = attempt_row(end_ns=BASE_NS + 50 * second, http_status=429, retry_after_s=0.25)
    earlier = attempt_row(end_ns=BASE_NS + 11 * second, http_status=429, retry_after_s=1.0)
    with raw_transaction(database_url) as conn:  # a re-sent span: the staging path
        assert write_attempts(conn, [limited, later, earlier]) == 2
    with read_session(database_url) as session:
        run = session.get(Run, "run-a")
    assert run is not None and run.wait_until_ns == BASE_NS + 50 * second + second // 4


def test_both_write_paths_give_a_run_the_same_facts(database_url: str) -> None:
    """The staging path (a batch holding a re-sent span) derives a run's longest interval
    and announced wait exactly as the fast COPY does, also for attempts with no queue wait
    and no ``Retry-After`` (NULL): PostgreSQL's LEAST and GREATEST skip NULLs, so a NULL
    once became the 3e9 s cap, and a run waited out ``ANNOUNCED_WAIT_MAX_S`` before its seal."""
    second = 10**9

    def rows(run_id: str) -> list[tuple[object, ...]]:
        return [
            attempt_row(run_id=run_id, end_ns=BASE_NS + 3 * second),  # no wait, no Retry-After
            attempt_row(run_id=run_id, queue_wait_s=-1.0, end_ns=BASE_NS + 3 * second),
            attempt_row(run_id=run_id, queue_wait_s=1.5, retry_after_s=0.0),
            attempt_row(run_id=run_id, http_status=429, retry_after_s=2.0),
        ]

    resent = attempt_row(run_id="staged")
    with raw_transaction(database_url) as conn:
        write_attempts(conn, rows("fast"))
        write_attempts(conn, [resent])
    with raw_transaction(database_url) as conn:
        assert write_attempts(conn, [resent, *rows("staged")]) == 4  # down the staging path
    with read_session(database_url) as session:
        fast, staged = session.get(Run, "fast"), session.get(Run, "staged")
    assert fast is not None and staged is not None
    assert fast.max_slot_ns == 3 * second + second // 2  # 2 s interval + 1.5 s queue wait
    assert (staged.max_slot_ns, staged.wait_until_ns) == (fast.max_slot_ns, fast.wait_until_ns)
    assert fast.wait_until_ns == BASE_NS + 4 * second
