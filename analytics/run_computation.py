"""Everything computed for one run from the database: events, figures, file, Merkle tree.

Loading happens in one REPEATABLE READ transaction, so the attempts and the ``runs`` row
(whose ``updated_at`` becomes the snapshot's ``data_as_of``) describe the same moment.
Sealing and re-verification both go through :func:`compute_run`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import polars as pl
import rfc8785

from analytics.minute_leaves import MinuteDigests
from analytics.minute_tree import MinuteTree, build_minute_tree
from analytics.rollups import attempts_to_events, shard_caps
from analytics.run_figures import RunAnalysis, RunContext, analyze_events
from analytics.run_span_limit import check_run_span_ns
from provenance.event_file import FileDigests, file_digests
from storage.attempt_frames import (
    SPLIT_FETCH_MIN_ATTEMPTS,
    RunFacts,
    begin_repeatable_read,
    fetch_run_attempts,
    fetch_run_facts,
)
from storage.database import raw_transaction
from storage.runs_read import UnknownRun

# Keys of the stored run object that the seal itself produces (not hashed into metrics).
SEAL_KEYS = ("seal", "snapshot_version")

__all__ = ["SEAL_KEYS", "RunComputation", "StageTimer", "UnknownRun", "compute_run", "load_run"]


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
    """One run's recomputed state; ``metrics`` is the run object (docs/metrics.md) minus seal keys.

    ``events`` are the canonical columns in fetch order (``file`` is in canonical order).
    """

    facts: RunFacts
    events: pl.DataFrame
    analysis: RunAnalysis
    file: FileDigests  # the canonical file's digests (the file itself is not kept)
    tree: MinuteTree
    metrics: dict[str, Any]

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
    consistent snapshot."""
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


def _sealed_file(events: pl.DataFrame, timer: StageTimer) -> tuple[FileDigests, MinuteDigests]:
    """The canonical file's digest, line count and per-minute digests, written and hashed
    a few minutes at a time: the seal never holds the whole file (provenance.event_file)."""
    with timer.stage("canonical_file", cpu=False):
        file = file_digests(events)
    return file, MinuteDigests(file.first_minute_ns, file.counts, file.digests)


def compute_run(
    url: str, run_id: str, timer: StageTimer | None = None, end_before_ns: int | None = None
) -> RunComputation:
    """Load ``run_id`` and compute its events, minute table, figures, file and tree
    (over the attempts that ended before ``end_before_ns``: a checkpoint).

    The canonical file and its hashes need no figures, so they are built in a worker
    thread while this thread computes the figures (Polars, NumPy and hashlib release
    the GIL); stages inside that block overlap, so only the block's CPU is recorded.
    """
    timer = timer or StageTimer()
    with timer.stage("fetch"):
        facts, attempts = load_run(url, run_id, end_before_ns)
    ends = attempts.get_column("end_ns")
    if ends.len():
        check_run_span_ns(run_id, int(ends.min()), int(ends.max()))  # type: ignore[arg-type]
    with timer.stage("events"):
        # In fetch order: the file writer puts lines in canonical order itself (docs/provenance.md).
        events = attempts_to_events(attempts)
        context = RunContext(
            run_id=run_id,
            caps=shard_caps(attempts),
            declared_shard_count=facts.declared_shard_count,
            concurrency_cap=facts.concurrency_cap,
            sweep_id=facts.sweep_id,
        )
    del attempts
    with timer.stage("figures_and_file"), ThreadPoolExecutor(max_workers=1) as pool:
        sealed = pool.submit(_sealed_file, events, timer)
        with timer.stage("compute", cpu=False):
            analysis = analyze_events(events, context)
        file, digests = sealed.result()
    with timer.stage("merkle"):
        tree = build_minute_tree(analysis.minutes, file, digests)
        metrics = {**analysis.figures, "events_sha256": file.sha256}
    return RunComputation(facts, events, analysis, file, tree, metrics)
