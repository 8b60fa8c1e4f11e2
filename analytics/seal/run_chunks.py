"""A run read as :class:`SealChunk` s, one end-time range of whole minutes at a time
(docs/provenance.md#streaming-seal).

Before the walk, two small sets settle what an attempt's figures need from attempts in
other chunks: the run's rollups (attempts another attempt names as parent; left out of
every figure) and the attempts of calls with more than one attempt (their order within
the call). Chunks hold about :data:`CHUNK_ATTEMPTS` attempts each, planned from the run's
average rate; a burst makes a chunk larger, never splits a minute. A chunk expected to
hold more than :data:`FETCH_ATTEMPTS` (a run whose minutes are fuller than a chunk) is read
in end-time slices of about that many, each made into events before the next is read, so
the read's buffers follow the slice, not the minute.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl
import psycopg

from tpmledger.analytics.kernels.event_plans import CALL_ORDER
from tpmledger.analytics.kernels.rollups import as_events
from tpmledger.analytics.kernels.run_span_limit import check_run_span_ns
from tpmledger.analytics.seal.seal_chunk import SealChunk
from tpmledger.durations import MINUTE_NS
from tpmledger.storage.readers.seal_reads import (
    SealPlan,
    SealScope,
    fetch_attempts_ending,
    fetch_repeated_calls,
    fetch_rollup_ids,
    fetch_seal_plan,
)

#: Attempts a chunk is planned to hold: about 2 KB each while it is read, written and
#: computed (two chunks at a time), so ~200 MB above the process's ~370 MB at rest.
CHUNK_ATTEMPTS = 100_000
#: Attempts one COPY is planned to read: a chunk of busier minutes is read in end-time
#: slices (a 994,000-attempt minute read whole peaked ~520 MB above its frame's start).
FETCH_ATTEMPTS = 100_000
#: A chunk holding more events than this (its minutes are fuller than a chunk: ~350 MB
#: at 1,000,000) is not read beside the next one (:meth:`RunChunks.prefetched`).
PREFETCH_MAX_ATTEMPTS = 2 * CHUNK_ATTEMPTS
_IDS = ["trace_id", "span_id"]


def chunk_ranges(plan: SealPlan, chunk_attempts: int = CHUNK_ATTEMPTS) -> list[tuple[int, int]]:
    """[low_ns, high_ns) ranges of whole minutes covering the run's first to last minute."""
    if plan.first_end_ns is None or plan.last_end_ns is None:
        return []
    first = plan.first_end_ns // MINUTE_NS
    last = plan.last_end_ns // MINUTE_NS
    minutes = last - first + 1
    per_minute = max(plan.attempts / minutes, 1.0)
    step = max(int(chunk_attempts / per_minute), 1)
    return [
        (m * MINUTE_NS, min(m + step, last + 1) * MINUTE_NS) for m in range(first, last + 1, step)
    ]


def fetch_slices(
    plan: SealPlan, low_ns: int, high_ns: int, fetch_attempts: int = FETCH_ATTEMPTS
) -> list[tuple[int, int]]:
    """[low_ns, high_ns) cut into end-time slices expected (at the run's average rate) to
    hold about ``fetch_attempts`` attempts each; one slice when the range holds fewer."""
    if plan.first_end_ns is None or plan.last_end_ns is None or high_ns <= low_ns:
        return [(low_ns, high_ns)]
    minutes = plan.last_end_ns // MINUTE_NS - plan.first_end_ns // MINUTE_NS + 1
    expected = plan.attempts / minutes * ((high_ns - low_ns) / MINUTE_NS)
    slices = min(max(math.ceil(expected / fetch_attempts), 1), high_ns - low_ns)
    step = -(-(high_ns - low_ns) // slices)
    return [(at, min(at + step, high_ns)) for at in range(low_ns, high_ns, step)]


def canonical_events(attempts: pl.DataFrame, rollups: pl.DataFrame) -> pl.DataFrame:
    """The canonical events (EVENT_SCHEMA columns) of stored attempts, rollups left out."""
    if rollups.height:
        attempts = attempts.join(rollups, on=_IDS, how="anti", maintain_order="left")
    return as_events(attempts)


class CallOrder:
    """Each attempt's place in its logical call: 0-based position and whether it is the
    last, by (start_ns, end_ns, span_id, trace_id) among the call's non-rollup attempts
    (docs/metrics.md#logical-calls). Only attempts of calls with several attempts are kept;
    any other attempt is the first and last of its call."""

    def __init__(self, repeated: pl.DataFrame, rollups: pl.DataFrame) -> None:
        if rollups.height:
            repeated = repeated.join(rollups, on=_IDS, how="anti")
        ordered = repeated.sort("call_id", *CALL_ORDER)
        position = pl.int_range(pl.len(), dtype=pl.Int64).over("call_id")
        self._flags = ordered.select(
            *_IDS,
            call_position=position,
            call_last=position == pl.len().over("call_id") - 1,
        )

    @property
    def attempts(self) -> int:
        """Attempts kept (those of calls with several attempts)."""
        return self._flags.height

    def of(self, events: pl.DataFrame) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """``call_position`` and ``call_last`` of every row of ``events``."""
        if self._flags.height == 0 or events.height == 0:
            return np.zeros(events.height, dtype=np.int64), np.ones(events.height, dtype=np.bool_)
        joined = events.select(_IDS).join(self._flags, on=_IDS, how="left", maintain_order="left")
        return (
            joined.get_column("call_position").fill_null(0).to_numpy(),
            joined.get_column("call_last").fill_null(True).to_numpy(),
        )


@dataclass
class RunChunks:
    """Reads one run's chunks. ``conn`` and ``twin`` see one snapshot (the caller's
    REPEATABLE READ transaction and :func:`storage.readers.seal_reads.snapshot_twin`): the call set
    is read on ``twin`` while ``conn`` reads the plan (:func:`fetch_seal_plan`: extent,
    caps, shards; a run longer than the span limit is refused) and the rollups, and
    :meth:`prefetched` reads each next chunk on ``twin`` while the caller computes the
    current one."""

    conn: psycopg.Connection
    twin: psycopg.Connection
    run_id: str
    scope: SealScope

    def __post_init__(self) -> None:
        with ThreadPoolExecutor(max_workers=1) as pool:
            repeated = pool.submit(fetch_repeated_calls, self.twin, self.run_id, self.scope)
            self.plan = fetch_seal_plan(self.conn, self.run_id, self.scope)
            if self.plan.first_end_ns is not None and self.plan.last_end_ns is not None:
                check_run_span_ns(self.run_id, self.plan.first_end_ns, self.plan.last_end_ns)
            self.rollups = fetch_rollup_ids(self.conn, self.run_id, self.scope)
            self.calls = CallOrder(repeated.result(), self.rollups)

    def chunk(self, low_ns: int, high_ns: int) -> SealChunk:
        """The chunk of [low_ns, high_ns), read on ``twin``."""
        conn = self.twin
        # Each slice's attempts become events before the next slice is read.
        parts = [
            canonical_events(
                fetch_attempts_ending(conn, self.run_id, self.scope, low, high), self.rollups
            )
            for low, high in fetch_slices(self.plan, low_ns, high_ns, FETCH_ATTEMPTS)
        ]
        events = parts[0] if len(parts) == 1 else pl.concat(parts, rechunk=False)
        del parts
        # Attempts that end later but hold a slot (or wait for one) before high_ns.
        holding = fetch_attempts_ending(
            conn,
            self.run_id,
            self.scope,
            high_ns,
            high_ns + self.plan.reach_ns + 1,
            began_before_ns=high_ns,
        )
        position, last = self.calls.of(events)
        reach = canonical_events(holding, self.rollups)
        return SealChunk(low_ns, high_ns, events, reach, position, last)

    def prefetched(self, ranges: list[tuple[int, int]]) -> Iterator[SealChunk]:
        """The chunks of ``ranges`` in order; the next one is read while the caller works
        on the current one (two chunks in memory at most), unless the current one holds
        more than :data:`PREFETCH_MAX_ATTEMPTS` events: then the next is read only when
        asked for, so a run of full minutes holds one of them at a time."""
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending: Future[SealChunk] | None = None
            for i, (low_ns, high_ns) in enumerate(ranges):
                current = pending.result() if pending is not None else self.chunk(low_ns, high_ns)
                pending = None
                if i + 1 < len(ranges) and not is_large(current):
                    pending = pool.submit(self.chunk, *ranges[i + 1])
                yield current
                del current  # not held while the next chunk is read


def is_large(chunk: SealChunk) -> bool:
    """A chunk of more than :data:`PREFETCH_MAX_ATTEMPTS` events: finished (file written,
    figures folded) before the next chunk is read."""
    return chunk.events.height > PREFETCH_MAX_ATTEMPTS
