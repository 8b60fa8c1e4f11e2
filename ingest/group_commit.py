"""Group commit: many export requests, one COPY-based transaction (docs/ingest.md "200 means
committed").

Requests wait in a BOUNDED queue (counted in spans), each as one COPY-encoded
:class:`~storage.codecs.attempt_encoding.AttemptBlock`. A writer task takes as many waiting
requests as fit into ``max_commit_spans`` and stores all their rows with
:func:`storage.writers.bulk_writer.commit_attempt_blocks` in one transaction; every
request's future resolves only after that transaction committed. While one group commits,
the next one accumulates, so the number of transactions per second adapts to the
database's speed instead of to the request rate.

Failures follow :mod:`ingest.error_taxonomy`: a full queue is :class:`Overloaded`; a lost
or refused connection fails the group with :class:`DatabaseUnavailable` and the next group
reconnects; rows the database refuses for what they contain (a poison request: SQLSTATE
classes 22, 23, 54) are isolated by committing that group's requests one by one, so only
the bad request is answered 400. Any other failure is ours, not the sender's: each request
of the group is answered 503 (:class:`~ingest.error_taxonomy.InternalFailure`), counted and
logged once per cause by :class:`~ingest.internal_errors.InternalErrors`.

``connections`` writer tasks (lanes) may drain the same queue, each with its own
connection used from its own thread only, so COPY of one group overlaps the commit of
another; the event loop never blocks on the database. Concurrent lanes stay deadlock-free
on ``runs`` because the bulk writer upserts runs in ``run_id`` order.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import psycopg

from tpmledger.ingest.error_taxonomy import (
    DatabaseUnavailable,
    Overloaded,
    PoisonRequest,
    ShuttingDown,
    is_bad_rows,
    is_unavailable,
)
from tpmledger.ingest.internal_errors import InternalErrors
from tpmledger.ingest.metrics import IngestMetrics
from tpmledger.storage.codecs.attempt_encoding import AttemptBlock
from tpmledger.storage.server.database import connect_raw
from tpmledger.storage.server.ingest_activity import INGEST_WRITER
from tpmledger.storage.writers.bulk_writer import RunArchivedMeanwhile, commit_attempt_blocks

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Pending:
    block: AttemptBlock
    future: asyncio.Future[None]
    spans: int  # block.rows when queued (the writer may refuse some: archived runs)


class _Lane:
    """One writer connection and the one thread that may use it."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"group-commit-{number}"
        )
        self.conn: psycopg.Connection | None = None
        self.commit_started: float | None = None  # monotonic; set while a commit runs

    def disconnect(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(psycopg.Error):
                self.conn.close()
            self.conn = None


class GroupCommitWriter:
    """Bounded queue + writer tasks (one per connection), each committing many requests
    per transaction."""

    def __init__(
        self,
        database_url: str,
        *,
        max_queue_spans: int = 200_000,
        max_commit_spans: int = 50_000,
        retry_after_s: int = 2,
        metrics: IngestMetrics | None = None,
        connect: Callable[[str], psycopg.Connection] | None = None,
        connections: int = 1,
    ) -> None:
        self._url = database_url
        self._max_queue_spans = max_queue_spans
        self._max_commit_spans = max_commit_spans
        self._retry_after_s = retry_after_s
        self._metrics = metrics or IngestMetrics()
        #: Unexpected failures (of this writer and of the normalizer feeding it).
        self.internal_errors = InternalErrors(self._metrics, retry_after_s)
        # Named, so the live loop sees a saturated writer and yields to it
        # (storage/server/ingest_activity.py).
        self._connect = connect or (
            lambda url: connect_raw(url, connect_timeout=2, application_name=INGEST_WRITER)
        )
        self._queue: collections.deque[_Pending] = collections.deque()
        self._outstanding_spans = 0  # waiting + being committed: the memory bound
        self._wakeup = asyncio.Event()
        self._closing = False
        self._lanes = [_Lane(i) for i in range(max(1, connections))]
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def outstanding_spans(self) -> int:
        """Spans accepted but not yet answered (queued or in the running commit)."""
        return self._outstanding_spans

    def stalled_s(self) -> float:
        """How long the oldest commit still running has been running (0 when none is):
        ``/readyz`` reports the writer stuck past ``TPMLEDGER_COMMIT_STUCK_AFTER_S``."""
        now = time.monotonic()
        started = [lane.commit_started for lane in self._lanes if lane.commit_started]
        return max((now - t for t in started), default=0.0)

    def start(self) -> None:
        """Start one writer task per connection on the running event loop."""
        if not self._tasks:
            loop = asyncio.get_running_loop()
            self._tasks = [
                loop.create_task(self._run(lane), name=f"group-commit-{lane.number}")
                for lane in self._lanes
            ]

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

    async def submit(self, block: AttemptBlock) -> None:
        """Store ``block``'s rows; returns once they are committed, raises an ``IngestError``
        if not."""
        if self._closing:
            raise ShuttingDown("ingest is shutting down", retry_after_s=self._retry_after_s)
        if not block.rows and not block.tool_rows:
            return
        # A single request larger than the bound is still accepted into an empty queue,
        # otherwise it could never be stored.
        if self._outstanding_spans and self._outstanding_spans + block.rows > self._max_queue_spans:
            raise Overloaded(
                f"ingest queue full ({self._outstanding_spans} spans waiting); retry later",
                retry_after_s=self._retry_after_s,
            )
        pending = _Pending(block, asyncio.get_running_loop().create_future(), block.rows)
        self._queue.append(pending)
        self._outstanding_spans += block.rows
        self._update_gauges()
        self._wakeup.set()
        await pending.future

    async def close(self) -> None:
        """Stop accepting, commit everything already queued, then release the connection."""
        self._closing = True
        self._wakeup.set()
        await asyncio.gather(*self._tasks)
        loop = asyncio.get_running_loop()
        for lane in self._lanes:
            await loop.run_in_executor(lane.executor, lane.disconnect)
            lane.executor.shutdown(wait=True)

    async def _run(self, lane: _Lane) -> None:
        while True:
            if not self._queue:
                if self._closing:
                    self._wakeup.set()  # let the other lanes see it too
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            group = self._take_group()
            try:
                await self._commit(lane, group)
            finally:
                self._outstanding_spans -= sum(p.spans for p in group)
                self._update_gauges()

    def _take_group(self) -> list[_Pending]:
        group = [self._queue.popleft()]
        spans = group[0].spans
        while self._queue and spans + self._queue[0].spans <= self._max_commit_spans:
            spans += self._queue[0].spans
            group.append(self._queue.popleft())
        return group

    async def _commit(self, lane: _Lane, group: list[_Pending], tries: int = 3) -> None:
        loop = asyncio.get_running_loop()
        try:
            new = await loop.run_in_executor(lane.executor, self._write_group, lane, group)
        except RunArchivedMeanwhile:
            # A prune archived one of the group's runs while it was written; written again,
            # that run's spans are refused (partial success) and the others stored.
            if tries > 1:
                await self._commit(lane, group, tries - 1)
                return
            self._fail(group, DatabaseUnavailable("retry later", retry_after_s=1))
            return
        except Exception as exc:
            if is_unavailable(exc, lane.conn):
                log.warning("database unavailable, %d requests answered 503: %s", len(group), exc)
                await loop.run_in_executor(lane.executor, lane.disconnect)
                error = DatabaseUnavailable(
                    "database unavailable; retry later", retry_after_s=self._retry_after_s
                )
                self._fail(group, error)
                return
            if len(group) > 1:
                # One request's rows broke the whole group: commit them one by one.
                for pending in group:
                    await self._commit(lane, [pending])
                return
            if not is_bad_rows(exc):
                with contextlib.suppress(Exception):  # the connection's state is unknown
                    await loop.run_in_executor(lane.executor, lane.disconnect)
                runs = group[0].block.runs
                self._fail(group, self.internal_errors.record("store", exc, lambda: runs))
                return
            log.warning("rows of one request refused (answered 400): %r", exc)
            self._fail(group, PoisonRequest(f"the database refused these spans: {exc}"))
            return
        self._metrics.spans_stored.inc(new)
        self._metrics.commit_group_requests.observe(len(group))
        for pending in group:
            if not pending.future.done():
                pending.future.set_result(None)

    def _write_group(self, lane: _Lane, group: list[_Pending]) -> int:
        """Runs in the lane's thread: one transaction for every row of the group."""
        reused = lane.conn is not None
        try:
            return self._write_once(lane, group)
        except Exception as exc:
            if not reused or not is_unavailable(exc, lane.conn):
                raise
            # A connection that sat idle may have died with a database restart; one fresh
            # attempt avoids a needless 503. Safe: the insert is idempotent.
            lane.disconnect()
            return self._write_once(lane, group)

    def _write_once(self, lane: _Lane, group: list[_Pending]) -> int:
        if lane.conn is None or lane.conn.closed or lane.conn.broken:
            lane.disconnect()
            lane.conn = self._connect(self._url)
            log.info("group-commit writer %d connected to the database", lane.number)
        conn = lane.conn
        started = time.perf_counter()
        lane.commit_started = time.monotonic()
        try:
            new = commit_attempt_blocks(conn, [p.block for p in group])
        finally:
            lane.commit_started = None
        self._metrics.commit_latency.observe(time.perf_counter() - started)
        return new

    @staticmethod
    def _fail(group: list[_Pending], error: Exception) -> None:
        for pending in group:
            if not pending.future.done():
                pending.future.set_exception(error)

    def _update_gauges(self) -> None:
        self._metrics.queue_depth_spans.set(self._outstanding_spans)
        self._metrics.queue_depth_requests.set(len(self._queue))
