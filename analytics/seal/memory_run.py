"""A run's minute table and figures from canonical events held in memory: the streaming
seal's walk (:class:`~tpmledger.analytics.seal.run_stream.RunStream`) over one chunk.

The product computes every figure one way, by the stream (docs/architecture.md). A run
already in memory (an empty run, the kernel warm-up, a summary built without a
database) is folded as a single :class:`SealChunk` covering all its minutes; what the
seal's plan settles before the walk (each attempt's place in its logical call,
docs/metrics.md#logical-calls) is computed here from the events themselves.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import numpy.typing as npt
import polars as pl

from tpmledger.analytics.kernels.event_plans import CALL_ORDER
from tpmledger.analytics.kernels.logical_calls import repeated
from tpmledger.analytics.kernels.run_figures import RunAnalysis, RunContext
from tpmledger.analytics.seal.run_stream import RunStream
from tpmledger.analytics.seal.seal_chunk import SealChunk
from tpmledger.durations import MINUTE_NS


def call_places(events: pl.DataFrame) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
    """``call_position`` and ``call_last`` of every row of ``events``: its 0-based place in
    its logical call by (start_ns, end_ns, span_id, trace_id) among the events with the same
    ``call_id``, and whether it is the call's last (as :class:`seal.run_chunks.CallOrder`).

    Most calls have one attempt (first and last). Only the rows whose ``call_id`` hash
    occurs more than once (:func:`~analytics.kernels.logical_calls.repeated`) are ordered,
    by the ids themselves: equal ids hash alike, and rows of different ids that share a
    hash stay apart there, so a collision costs a row in that small sort, never a wrong
    place.
    """
    position = np.zeros(events.height, dtype=np.int64)
    last = np.ones(events.height, dtype=np.bool_)
    if events.height < 2:
        return position, last
    candidates = repeated(events.get_column("call_id").hash().to_numpy())
    if not candidates.any():
        return position, last
    ordered_calls = (
        events.select("call_id", *CALL_ORDER)
        .filter(pl.Series(candidates))
        .with_columns(row=pl.Series(np.flatnonzero(candidates)))
        .sort("call_id", *CALL_ORDER)
    )
    ids = ordered_calls.get_column("call_id")
    # Each sorted row's place: rows since its call's first row; the last row of a call
    # is the one before the next call's first.
    changes = ids.slice(1).ne_missing(ids.slice(0, ids.len() - 1)).to_numpy()
    first = np.concatenate([[True], changes])
    index = np.arange(ids.len(), dtype=np.int64)
    at = ordered_calls.get_column("row").to_numpy()
    position[at] = index - np.maximum.accumulate(np.where(first, index, 0))
    last[at] = np.concatenate([changes, [True]])
    return position, last


def _run_id(events: pl.DataFrame) -> str | None:
    run_ids = events.get_column("run_id").drop_nulls().unique().sort()
    return run_ids[0] if run_ids.len() else None


def fold_events(events: pl.DataFrame, context: RunContext | None = None) -> RunAnalysis:
    """Minute table (``minute_ns``) and run figures of canonical ``events`` (any row order,
    rollups already left out), folded by the streaming seal as one chunk. Without a
    ``context`` run id, the events' (smallest) run id names the run."""
    context = context or RunContext()
    if context.run_id is None:
        context = replace(context, run_id=_run_id(events))
    shard_ids = tuple(sorted(events.get_column("shard_id").drop_nulls().unique().to_list()))
    low_ns = high_ns = 0
    if events.height:
        ends = events.get_column("end_ns")
        low_ns = int(ends.min()) // MINUTE_NS * MINUTE_NS  # type: ignore[arg-type]
        high_ns = (int(ends.max()) // MINUTE_NS + 1) * MINUTE_NS  # type: ignore[arg-type]
    position, last = call_places(events)
    stream = RunStream(shard_ids, context)
    stream.add(SealChunk(low_ns, high_ns, events, events.clear(), position, last))
    return stream.finish()
