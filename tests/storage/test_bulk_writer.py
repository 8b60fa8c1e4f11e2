from sqlalchemy import select

from storage.bulk_writer import write_attempts
from storage.database import raw_transaction, read_session
from storage.models import Attempt, Run
from tests.storage.builders import BASE_NS, attempt_row


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
