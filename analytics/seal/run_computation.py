"""Everything computed for one run from the database: figures, file digests, Merkle tree.

Reading happens in one :class:`SealView`, a REPEATABLE READ snapshot, so every chunk of
attempts, the ``runs`` row (whose ``updated_at`` becomes the snapshot's ``data_as_of``)
and every other input of a seal describe the same moment. Sealing and re-verification
both go through :func:`compute_in_view`, which streams (docs/provenance.md#streaming-seal).
Only entry points open a view (docs/architecture.md#data-access).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol, TypeVar

import polars as pl
import psycopg
import rfc8785
from sqlalchemy.orm import Session

from tpmledger.analytics.kernels.figure_rules import clean
from tpmledger.analytics.kernels.run_figures import RunAnalysis, RunContext
from tpmledger.analytics.seal.memory_run import fold_events
from tpmledger.analytics.seal.minute_leaves import MinuteDigests
from tpmledger.analytics.seal.minute_tree import MinuteTree, build_minute_tree
from tpmledger.analytics.seal.run_chunks import CHUNK_ATTEMPTS, RunChunks, chunk_ranges, is_large
from tpmledger.analytics.seal.run_stream import RunStream
from tpmledger.analytics.seal.seal_chunk import SealChunk
from tpmledger.analytics.verdicts.bottleneck import bottleneck_verdict
from tpmledger.provenance.event_file import EVENT_SCHEMA, FileDigests, FileDigestStream
from tpmledger.storage.readers.attempt_frames import (
    SPLIT_FETCH_MIN_ATTEMPTS,
    RunFacts,
    begin_repeatable_read,
    fetch_run_attempts,
    fetch_run_facts,
)
from tpmledger.storage.readers.runs_read import UnknownRun
from tpmledger.storage.readers.seal_reads import (
    SealScope,
    prepare_seal_transaction,
    snapshot_twin,
)
from tpmledger.storage.readers.server_minutes_read import fetch_server_minutes, run_models
from tpmledger.storage.readers.target_minutes import TargetMinute, fetch_target_minutes
from tpmledger.storage.schema.minute_keys import WHOLE_RUN
from tpmledger.storage.server.database import driver_connection, raw_transaction, read_view

# Keys of the stored run object that the seal itself produces (not hashed into metrics).
SEAL_KEYS = ("seal", "snapshot_version")

__all__ = [
    "SEAL_KEYS",
    "ChunkConsumer",
    "RunComputation",
    "SealView",
    "StageTimer",
    "UnknownRun",
    "compute_in_view",
    "compute_run",
    "in_seal_view",
    "load_run",
    "seal_view",
]

T = TypeVar("T")


class SealView:
    """One REPEATABLE READ snapshot of the database that a seal, a verification or an
    export reads all its inputs from: :attr:`session` (the ORM reads) and :attr:`conn`
    (its psycopg connection, for the COPY reads), plus :meth:`twin` connections that import
    the same snapshot (``SET TRANSACTION SNAPSHOT``) for the seal's parallel readers.

    Opened and closed by :func:`seal_view` (an entry point's business); everything below
    takes the view. The transaction itself is storage's (:func:`read_view`)."""

    def __init__(self, session: Session, open_twin: Callable[[], psycopg.Connection]) -> None:
        self.session = session
        self.conn: psycopg.Connection = driver_connection(session)
        self._open_twin = open_twin  # closed with the view by its opener
        self._twins: list[psycopg.Connection] = []

    def twin(self, index: int) -> psycopg.Connection:
        """The ``index``-th connection (from 0) that sees exactly this view's snapshot,
        opened on first use and closed with the view (on Citus, :attr:`conn` itself:
        :func:`storage.readers.seal_reads.snapshot_twin`)."""
        while len(self._twins) <= index:
            self._twins.append(self._open_twin())
        return self._twins[index]


@contextmanager
def seal_view(url: str) -> Iterator[SealView]:
    """Open a :class:`SealView` of ``url``'s database; its session and twins close on exit.
    Takes a URL: entry points (a command, a worker loop, a child process) open views."""
    with read_view(url) as session, ExitStack() as twins:
        conn = driver_connection(session)
        yield SealView(session, lambda: twins.enter_context(snapshot_twin(conn, url)))


def in_seal_view(url: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(view, *args, **kwargs)`` in one :func:`seal_view`. Takes a URL: what an entry
    point calls."""
    with seal_view(url) as view:
        return fn(view, *args, **kwargs)


@dataclass
class StageTimer:
    """Wall-clock and this process's CPU seconds per stage (the benchmark prints them)."""

    seconds: dict[str, float] = field(default_factory=dict)
    cpu_seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def stage(self, name: str, *, cpu: bool = True) -> Iterator[None]:
        """Time a stage; ``cpu=False`` for one that overlaps others (process CPU would
        count their work too), which then records wall-clock seconds only."""
        start, used = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
            if cpu:
                spent = time.process_time() - used
                self.cpu_seconds[name] = self.cpu_seconds.get(name, 0.0) + spent


@dataclass(frozen=True)
class RunComputation:
    """One run's recomputed state; ``metrics`` is the run object (docs/metrics.md) minus seal
    keys. The events themselves are not kept: the seal reads them a chunk at a time."""

    facts: RunFacts
    analysis: RunAnalysis
    file: FileDigests  # the canonical file's digests (the file itself is not kept)
    tree: MinuteTree
    metrics: dict[str, Any]
    explicit_call_ids: bool = False  # some event's call id was set explicitly
    # Used versus quota per target and minute (docs/metrics.md#quota-headroom), sealed beside
    # the version so pages read them without scanning attempts.
    targets: list[TargetMinute] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return self.facts.run_id

    @property
    def metrics_sha256(self) -> str:
        return metrics_sha256(self.metrics)


def metrics_sha256(metrics: dict[str, Any]) -> str:
    """SHA-256 of the JCS of the run object without ``seal`` and ``snapshot_version``."""
    hashed = {k: v for k, v in metrics.items() if k not in SEAL_KEYS}
    return hashlib.sha256(rfc8785.dumps(hashed)).hexdigest()


def load_run(
    url: str,
    run_id: str,
    end_before_ns: int | None = None,
    received_by: datetime | None = None,
) -> tuple[RunFacts, pl.DataFrame]:
    """The run's facts and its stored attempts (those that ended before
    ``end_before_ns`` and were stored by ``received_by``, when given), read from one
    consistent snapshot. Takes a URL: a test and bench helper (its split fetch connects a
    second backend)."""
    with raw_transaction(url) as conn:
        begin_repeatable_read(conn)
        facts = fetch_run_facts(conn, run_id)
        if facts is None:
            raise UnknownRun(run_id)
        # A large run is read by two backends at once, in this transaction's snapshot.
        split = url if facts.attempts >= SPLIT_FETCH_MIN_ATTEMPTS else None
        attempts = fetch_run_attempts(
            conn, run_id, split_url=split, end_before_ns=end_before_ns, received_by=received_by
        )
        return facts, attempts


def _walk(
    chunks: Iterator[SealChunk],
    stream: RunStream,
    files: FileDigestStream,
    consumers: Sequence[ChunkConsumer],
    timer: StageTimer,
) -> None:
    """Fold every chunk; a chunk's file is written and hashed in a worker thread while
    this thread computes its figures (the next chunk is being read meanwhile, unless this
    one is large: then its file is finished and it is let go before the next is read)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending: Future[None] | None = None
        while True:
            with timer.stage("fetch", cpu=False):  # waiting for the prefetched chunk
                chunk = next(chunks, None)
            if chunk is None:
                break
            if pending is not None:
                with timer.stage("canonical_file", cpu=False):
                    pending.result()
            pending = pool.submit(files.add, chunk.events)
            with timer.stage("compute", cpu=False):
                stream.add(chunk)
                for consumer in consumers:
                    consumer.add(chunk)
            if is_large(chunk) and pending is not None:
                with timer.stage("canonical_file", cpu=False):
                    pending.result()
                pending = None
            del chunk  # not held while the next chunk is read
        if pending is not None:
            with timer.stage("canonical_file", cpu=False):
                pending.result()


#: Told the attempts read so far and the run's total after each chunk.
Progress = Callable[[int, int], None]


def _reporting(chunks: Iterator[SealChunk], progress: Progress, total: int) -> Iterator[SealChunk]:
    done = 0
    for chunk in chunks:
        yield chunk
        done += chunk.events.height
        del chunk  # not held while the next chunk is read
        progress(done, total)


class ChunkConsumer(Protocol):
    """Anything else a seal computes from the same chunks (e.g. the sealed diagnostics)."""

    def add(self, chunk: SealChunk) -> None: ...


def compute_run(
    url: str,
    run_id: str,
    timer: StageTimer | None = None,
    end_before_ns: int | None = None,
    **options: Any,
) -> RunComputation:
    """:func:`compute_in_view` in a view of its own. Takes a URL: a test and bench helper
    (code below the entry points takes the view)."""
    return in_seal_view(url, compute_in_view, run_id, timer, end_before_ns, **options)


def compute_in_view(
    view: SealView,
    run_id: str,
    timer: StageTimer | None = None,
    end_before_ns: int | None = None,
    *,
    received_by: datetime | None = None,
    consumers: Sequence[ChunkConsumer] = (),
    chunk_attempts: int = CHUNK_ATTEMPTS,
    progress: Progress | None = None,
) -> RunComputation:
    """Read ``run_id`` in ``view`` a chunk of minutes at a time and compute its minute
    table, figures, canonical file digests and tree (over the attempts that ended before
    ``end_before_ns``, a checkpoint, and were stored by ``received_by``, a rebuilt
    version). Memory follows the chunk, not the run (docs/provenance.md#streaming-seal).

    ``consumers`` see every chunk too; ``progress(done, total)`` is told the attempts read
    so far after each chunk (total: the run's stored attempts, rollups included). Each
    chunk's file is written and hashed in a worker thread while this thread computes its
    figures (hashlib, Polars and the compiled loops release the GIL); stages that overlap
    record wall time only. The next chunk is read on the view's first twin connection, the
    target-minute aggregate on its second.
    """
    timer = timer or StageTimer()
    scope = SealScope(end_before_ns, received_by)
    files = FileDigestStream()
    conn = view.conn
    prepare_seal_transaction(conn)
    facts = fetch_run_facts(conn, run_id)
    if facts is None:
        raise UnknownRun(run_id)
    twin, third = view.twin(0), view.twin(1)
    with ThreadPoolExecutor(max_workers=1) as aside:
        # The target-minute aggregate (docs/metrics.md#bottleneck) runs in PostgreSQL on a
        # third connection of the same snapshot while this process walks the chunks.
        pending = aside.submit(fetch_target_minutes, third, [run_id], scope)
        with timer.stage("plan"):
            chunks = RunChunks(conn, twin, run_id, scope)
            plan = chunks.plan
        context = RunContext(
            run_id=run_id,
            caps=plan.caps,
            declared_shard_count=facts.declared_shard_count,
            concurrency_cap=facts.concurrency_cap,
            sweep_id=facts.sweep_id,
        )
        stream = RunStream(plan.shard_ids, context)
        ranges = chunk_ranges(plan, chunk_attempts)
        walked = chunks.prefetched(ranges)
        if progress is not None:
            walked = _reporting(walked, progress, plan.attempts)
        _walk(walked, stream, files, consumers, timer)
        with timer.stage("targets", cpu=False):  # waiting for the aggregate, if at all
            targets = pending.result()
        # The serving side's minutes, joined on the run's models (few rows).
        servers = fetch_server_minutes(third, run_id, run_models(targets))
    with timer.stage("compute", cpu=False):
        analysis = (
            stream.finish()
            if stream.attempts
            else fold_events(pl.DataFrame(schema=EVENT_SCHEMA), context)
        )
    file = files.finish()
    digests = MinuteDigests(file.first_minute_ns, file.counts, file.digests)
    with timer.stage("merkle"):
        tree = build_minute_tree(analysis.minutes, file, digests)
        metrics = {**analysis.figures, "events_sha256": file.sha256}
    whole = analysis.minutes.filter(pl.col("shard_id") == WHOLE_RUN)
    metrics["bottleneck"] = clean(bottleneck_verdict(whole.to_dicts(), targets, servers=servers))
    return RunComputation(
        facts,
        analysis,
        file,
        tree,
        metrics,
        explicit_call_ids=stream.explicit_call_ids,
        targets=targets,
    )
