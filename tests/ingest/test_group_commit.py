"""GroupCommitWriter against a real PostgreSQL: batching, durability, overload, failures."""

from __future__ import annotations

import asyncio
import random
import string
import threading
from collections.abc import Callable

import psycopg
import pytest

from tests.storage.builders import attempt_row
from tpmledger.ingest import group_commit
from tpmledger.ingest.error_taxonomy import (
    DatabaseUnavailable,
    InternalFailure,
    Overloaded,
    PoisonRequest,
    ShuttingDown,
    is_bad_rows,
    is_unavailable,
)
from tpmledger.ingest.group_commit import GroupCommitWriter
from tpmledger.ingest.metrics import IngestMetrics
from tpmledger.storage.codecs.attempt_encoding import encode_attempts
from tpmledger.storage.server.database import connect_raw, libpq_url


def stored_count(url: str) -> int:
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute("SELECT count(*) FROM attempts").fetchone()
    return int(row[0]) if row else 0


def metric(metrics: IngestMetrics, name: str) -> float:
    value = metrics.registry.get_sample_value(name)
    return float(value or 0.0)


def gated_connect(gate: threading.Event) -> Callable[[str], psycopg.Connection]:
    """A connect seam that holds the writer thread until ``gate`` is set."""

    def connect(url: str) -> psycopg.Connection:
        gate.wait(10)
        return connect_raw(url)

    return connect


@pytest.mark.slow
@pytest.mark.parametrize("connections", [1, 2])
def test_concurrent_requests_share_transactions_and_return_after_commit(
    database_url: str, connections: int
) -> None:
    metrics = IngestMetrics()

    async def scenario() -> None:
        writer = GroupCommitWriter(database_url, metrics=metrics, connections=connections)
        writer.start()

        async def send() -> None:
            await writer.submit(encode_attempts([attempt_row() for _ in range(50)]))
            # 200 means committed: a separate connection already sees this request's rows.
            assert stored_count(database_url) >= 50

        await asyncio.gather(*(send() for _ in range(40)))
        await writer.close()

    asyncio.run(scenario())
    assert stored_count(database_url) == 2000
    assert metric(metrics, "tpmledger_ingest_spans_stored_total") == 2000
    transactions = metric(metrics, "tpmledger_ingest_commit_latency_seconds_count")
    assert 1 <= transactions < 40  # grouped: fewer transactions than requests


def test_resent_rows_are_stored_once(database_url: str) -> None:
    metrics = IngestMetrics()
    rows = [attempt_row() for _ in range(10)]

    async def scenario() -> None:
        writer = GroupCommitWriter(database_url, metrics=metrics)
        writer.start()
        await writer.submit(encode_attempts(rows))
        await asyncio.gather(
            writer.submit(encode_attempts(rows)), writer.submit(encode_attempts(rows[:5]))
        )
        await writer.close()

    asyncio.run(scenario())
    assert stored_count(database_url) == 10
    assert metric(metrics, "tpmledger_ingest_spans_stored_total") == 10


def test_full_queue_answers_overloaded_without_blocking(database_url: str) -> None:
    gate = threading.Event()

    async def scenario() -> None:
        writer = GroupCommitWriter(
            database_url, max_queue_spans=10, connect=gated_connect(gate), retry_after_s=7
        )
        writer.start()
        tasks = [
            asyncio.create_task(writer.submit(encode_attempts([attempt_row() for _ in range(6)])))
        ]
        await asyncio.sleep(0.05)  # let the writer take it; the gate holds the commit
        assert writer.outstanding_spans == 6
        writer.check_admission()  # 6 of 10: still admitted
        with pytest.raises(Overloaded) as raised:
            await writer.submit(encode_attempts([attempt_row() for _ in range(5)]))
        assert raised.value.retry_after_s == 7
        assert raised.value.http_status == 503
        tasks.append(
            asyncio.create_task(writer.submit(encode_attempts([attempt_row() for _ in range(4)])))
        )
        await asyncio.sleep(0)
        with pytest.raises(Overloaded):
            writer.check_admission()  # 10 of 10: refused before any body is read
        gate.set()
        await asyncio.gather(*tasks)
        await writer.close()

    asyncio.run(scenario())
    assert stored_count(database_url) == 10


def test_database_down_is_unavailable_then_reconnects(database_url: str) -> None:
    down = threading.Event()
    down.set()

    def flaky_connect(url: str) -> psycopg.Connection:
        if down.is_set():
            raise psycopg.OperationalError("connection refused (simulated)")
        return connect_raw(url)

    rows = [attempt_row() for _ in range(3)]

    async def scenario() -> None:
        writer = GroupCommitWriter(database_url, connect=flaky_connect)
        writer.start()
        with pytest.raises(DatabaseUnavailable):
            await writer.submit(encode_attempts(rows))
        down.clear()
        await writer.submit(encode_attempts(rows))  # the same request, retried, is stored
        await writer.close()

    asyncio.run(scenario())
    assert stored_count(database_url) == 3


def test_a_connection_killed_while_idle_is_replaced_transparently(database_url: str) -> None:
    async def scenario() -> None:
        writer = GroupCommitWriter(database_url)
        writer.start()
        await writer.submit(encode_attempts([attempt_row()]))
        # Kill the writer's backend, as a PostgreSQL restart would.
        with psycopg.connect(libpq_url(database_url), autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        # The dead idle connection is replaced at once: no needless 503.
        await writer.submit(encode_attempts([attempt_row()]))
        await writer.close()

    asyncio.run(scenario())
    assert stored_count(database_url) == 2


def test_a_poison_request_fails_alone_and_the_rest_of_its_group_commits(database_url: str) -> None:
    gate = threading.Event()

    async def scenario() -> list[BaseException | None]:
        writer = GroupCommitWriter(database_url, connect=gated_connect(gate))
        writer.start()
        tasks = [
            asyncio.create_task(writer.submit(encode_attempts([attempt_row(), attempt_row()]))),
            asyncio.create_task(writer.submit(encode_attempts([attempt_row(run_id="bad\x00run")]))),
            asyncio.create_task(writer.submit(encode_attempts([attempt_row()]))),
        ]
        await asyncio.sleep(0.05)
        gate.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        await writer.close()
        return [r if isinstance(r, BaseException) else None for r in results]

    results = asyncio.run(scenario())
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], PoisonRequest)
    assert results[1].http_status == 400
    assert stored_count(database_url) == 3


def test_close_flushes_the_queue_and_refuses_new_requests(database_url: str) -> None:
    gate = threading.Event()

    async def scenario() -> None:
        writer = GroupCommitWriter(database_url, connect=gated_connect(gate))
        writer.start()
        queued = [
            asyncio.create_task(writer.submit(encode_attempts([attempt_row()]))) for _ in range(5)
        ]
        await asyncio.sleep(0.05)
        closing = asyncio.create_task(writer.close())
        await asyncio.sleep(0.05)
        with pytest.raises(ShuttingDown):
            await writer.submit(encode_attempts([attempt_row()]))
        with pytest.raises(ShuttingDown):
            writer.check_admission()
        gate.set()
        await asyncio.gather(*queued, closing)

    asyncio.run(scenario())
    assert stored_count(database_url) == 5


def test_rows_over_a_database_limit_are_poison_not_unavailable(database_url: str) -> None:
    """ProgramLimitExceeded is an OperationalError, but retrying cannot help: 400, not 503."""
    gate = threading.Event()
    incompressible = "".join(random.Random(7).choices(string.ascii_letters, k=10_000))

    async def scenario() -> list[BaseException | None]:
        writer = GroupCommitWriter(database_url, connect=gated_connect(gate))
        writer.start()
        tasks = [
            asyncio.create_task(writer.submit(encode_attempts([attempt_row()]))),
            asyncio.create_task(
                writer.submit(encode_attempts([attempt_row(run_id=incompressible)]))
            ),
            asyncio.create_task(writer.submit(encode_attempts([attempt_row()]))),
        ]
        await asyncio.sleep(0.05)
        gate.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        await writer.close()
        return [r if isinstance(r, BaseException) else None for r in results]

    results = asyncio.run(scenario())
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], PoisonRequest)
    assert stored_count(database_url) == 2


def test_an_unexpected_storage_failure_is_retryable_and_the_retry_stores(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in the writer (here: the bulk writer raising TypeError) is not the sender's
    fault: every request of the group gets 503 (not 400), counted as a store-stage internal
    error; once the bug is gone the same blocks commit."""
    metrics = IngestMetrics()
    real = group_commit.commit_attempt_blocks
    broken = threading.Event()
    broken.set()

    def write(conn: psycopg.Connection, blocks: list) -> int:  # type: ignore[type-arg]
        if broken.is_set():
            raise TypeError("a bug in the writer")
        return real(conn, blocks)

    monkeypatch.setattr(group_commit, "commit_attempt_blocks", write)
    blocks = [encode_attempts([attempt_row(run_id="run-store-bug")]) for _ in range(3)]

    async def scenario() -> list[BaseException | None]:
        writer = GroupCommitWriter(database_url, metrics=metrics)
        writer.start()
        results = await asyncio.gather(
            *(writer.submit(block) for block in blocks), return_exceptions=True
        )
        broken.clear()
        for block in blocks:  # the exporter's retry
            await writer.submit(block)
        await writer.close()
        return [r if isinstance(r, BaseException) else None for r in results]

    results = asyncio.run(scenario())
    assert all(isinstance(r, InternalFailure) and r.http_status == 503 for r in results), results
    assert metric(metrics, "tpmledger_ingest_internal_errors_total") == 0  # labelled only
    assert (
        metrics.registry.get_sample_value(
            "tpmledger_ingest_internal_errors_total", {"stage": "store"}
        )
        >= 3
    )
    assert stored_count(database_url) == 3


def test_bad_rows_classification() -> None:
    assert is_bad_rows(psycopg.errors.CharacterNotInRepertoire())
    assert is_bad_rows(psycopg.errors.ProgramLimitExceeded())
    assert is_bad_rows(psycopg.errors.UniqueViolation())
    assert not is_bad_rows(psycopg.errors.SyntaxError())  # our SQL, not their rows
    assert not is_bad_rows(psycopg.errors.UndefinedColumn())
    assert not is_bad_rows(TypeError("bug"))


def test_unavailable_classification() -> None:
    assert is_unavailable(psycopg.OperationalError("connection refused"), None)
    assert is_unavailable(psycopg.errors.AdminShutdown(), None)
    assert is_unavailable(psycopg.errors.DeadlockDetected(), None)
    assert is_unavailable(psycopg.errors.DiskFull(), None)
    assert is_unavailable(psycopg.InterfaceError("closed"), None)
    assert not is_unavailable(psycopg.errors.ProgramLimitExceeded(), None)
    assert not is_unavailable(psycopg.errors.UntranslatableCharacter(), None)
    assert not is_unavailable(ValueError("bad row"), None)
