"""Group commit: many export requests, one COPY-based transaction (SPEC §3 "200 means committed").

Requests wait in a BOUNDED queue (counted in spans). One writer task takes as many
waiting requests as fit into ``max_commit_spans`` and stores all their rows with
:func:`storage.bulk_writer.write_attempts` inside one
:func:`storage.database.in_transaction`; every request's future resolves only after that
transaction committed. While one group commits, the next one accumulates, so the number
of transactions per second adapts to the database's speed instead of to the request rate.

Failures follow :mod:`ingest.error_taxonomy`: a full queue is :class:`Overloaded`; a lost
or refused connection fails the group with :class:`DatabaseUnavailable` and the next group
reconnects; rows the database refuses (a poison request) are isolated by committing that
group's requests one by one, so only the bad request is answered 400.

The psycopg connection is used from one dedicated thread only; the event loop never blocks
on the database.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import psycopg

from ingest.error_taxonomy import DatabaseUnavailable, Overloaded, PoisonRequest, ShuttingDown
from ingest.metrics import IngestMetrics
from storage.bulk_writer import write_attempts
from storage.database import connect_raw, in_transaction

log = logging.getLogger(__name__)

Row = Sequence[Any]


@dataclass(slots=True)
class _Pending:
    rows: Sequence[Row]
    future: asyncio.Future[None]


class GroupCommitWriter:
    """Bounded queue + one writer task that commits many requests per transaction."""

    def __init__(
        self,
        database_url: str,
        *,
        max_queue_spans: int = 200_000,
        max_commit_spans: int = 50_000,
        retry_after_s: int = 2,
        metrics: IngestMetrics | None = None,
        connect: Callable[[str], psycopg.Connection] | None = None,
    ) -> None:
        self._url = database_url
        self._max_queue_spans = max_queue_spans
        self._max_commit_spans = max_commit_spans
        self._retry_after_s = retry_after_s
        self._metrics = metrics or IngestMetrics()
        self._connect = connect or (lambda url: connect_raw(url, connect_timeout=2))
        self._queue: collections.deque[_Pending] = collections.deque()
        self._outstanding_spans = 0  # waiting + being committed: the memory bound
        self._wakeup = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="group-commit")
        self._conn: psycopg.Connection | None = None

    @property
    def outstanding_spans(self) -> int:
        """Spans accepted but not yet answered (queued or in the running commit)."""
        return self._outstanding_spans

    def start(self) -> None:
        """Start the writer task on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="group-commit")

    def check_admission(self) -> None:
        """Raise :class:`Overloaded` / :class:`ShuttingDown` now if a request would be refused.

        Listeners call it before reading and normalizing a body, so an overloaded server
        spends no CPU or memory on requests it is going to refuse anyway.
        """
        if self._closing:
            raise ShuttingDown("ingest is shutting down", retry_after_s=self._retry_after_s)
        if self._outstanding_spans >= self._max_queue_spans:
            raise Overloaded(
                f"ingest queue full ({self._outstanding_spans} spans waiting); retry later",
                retry_after_s=self._retry_after_s,
            )

    async def submit(self, rows: Sequence[Row]) -> None:
        """Store ``rows``; returns once they are committed, raises an ``IngestError`` if not."""
        if self._closing:
            raise ShuttingDown("ingest is shutting down", retry_after_s=self._retry_after_s)
        if not rows:
            return
        # A single request larger than the bound is still accepted into an empty queue,
        # otherwise it could never be stored.
        if self._outstanding_spans and self._outstanding_spans + len(rows) > self._max_queue_spans:
            raise Overloaded(
                f"ingest queue full ({self._outstanding_spans} spans waiting); retry later",
                retry_after_s=self._retry_after_s,
            )
        pending = _Pending(rows, asyncio.get_running_loop().create_future())
        self._queue.append(pending)
        self._outstanding_spans += len(rows)
        self._update_gauges()
        self._wakeup.set()
        await pending.future

    async def close(self) -> None:
        """Stop accepting, commit everything already queued, then release the connection."""
        self._closing = True
        self._wakeup.set()
        if self._task is not None:
            await self._task
        await asyncio.get_running_loop().run_in_executor(self._executor, self._disconnect)
        self._executor.shutdown(wait=True)

    async def _run(self) -> None:
        while True:
            if not self._queue:
                if self._closing:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            group = self._take_group()
            try:
                await self._commit(group)
            finally:
                self._outstanding_spans -= sum(len(p.rows) for p in group)
                self._update_gauges()

    def _take_group(self) -> list[_Pending]:
        group = [self._queue.popleft()]
        spans = len(group[0].rows)
        while self._queue and spans + len(self._queue[0].rows) <= self._max_commit_spans:
            spans += len(self._queue[0].rows)
            group.append(self._queue.popleft())
        return group

    async def _commit(self, group: list[_Pending]) -> None:
        loop = asyncio.get_running_loop()
        try:
            new = await loop.run_in_executor(self._executor, self._write_group, group)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            log.warning("database unavailable, %d requests answered 503: %s", len(group), exc)
            await loop.run_in_executor(self._executor, self._disconnect)
            self._fail(
                group,
                DatabaseUnavailable(
                    "database unavailable; retry later", retry_after_s=self._retry_after_s
                ),
            )
            return
        except Exception as exc:
            if self._conn is not None and self._conn.broken:
                await loop.run_in_executor(self._executor, self._disconnect)
                self._fail(
                    group,
                    DatabaseUnavailable(
                        "database connection lost; retry later", retry_after_s=self._retry_after_s
                    ),
                )
                return
            if len(group) > 1:
                # One request's rows broke the whole group: commit them one by one.
                for pending in group:
                    await self._commit([pending])
                return
            log.warning("rows of one request refused (answered 400): %r", exc)
            self._fail(group, PoisonRequest(f"the database refused these spans: {exc}"))
            return
        self._metrics.spans_stored.inc(new)
        self._metrics.commit_group_requests.observe(len(group))
        for pending in group:
            if not pending.future.done():
                pending.future.set_result(None)

    def _write_group(self, group: list[_Pending]) -> int:
        """Runs in the writer thread: one transaction for every row of the group."""
        reused = self._conn is not None
        try:
            return self._write_once(group)
        except (psycopg.OperationalError, psycopg.InterfaceError):
            if not reused:
                raise
            # A connection that sat idle may have died with a database restart; one fresh
            # attempt avoids a needless 503. Safe: the insert is idempotent.
            self._disconnect()
            return self._write_once(group)

    def _write_once(self, group: list[_Pending]) -> int:
        conn = self._connection()
        started = time.perf_counter()
        with in_transaction(conn):
            new = write_attempts(conn, itertools.chain.from_iterable(p.rows for p in group))
        self._metrics.commit_latency.observe(time.perf_counter() - started)
        return new

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._disconnect()
            self._conn = self._connect(self._url)
            log.info("group-commit writer connected to the database")
        return self._conn

    def _disconnect(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
            self._conn = None

    @staticmethod
    def _fail(group: list[_Pending], error: Exception) -> None:
        for pending in group:
            if not pending.future.done():
                pending.future.set_exception(error)

    def _update_gauges(self) -> None:
        self._metrics.queue_depth_spans.set(self._outstanding_spans)
        self._metrics.queue_depth_requests.set(len(self._queue))
