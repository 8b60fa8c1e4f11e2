"""One end-time range of a run, as the streaming seal reads it (docs/provenance.md#streaming-seal).

A seal walks a run in chunks of whole minutes, in end-time order, so memory follows the
chunk, not the run. Every figure is either a sum over chunks or is computed from
per-chunk parts that merge exactly; what an attempt's figures need from attempts in other
chunks is settled before the walk and handed over with the chunk:

- ``events``: the canonical events (:data:`provenance.event_file.EVENT_SCHEMA` columns,
  rollups excluded) that end in ``[low_ns, high_ns)``, in any order;
- ``reach``: the canonical events that end in ``[high_ns, high_ns + reach_ns)``, where
  ``reach_ns`` is the run's longest queued-to-released interval: with ``events`` they are
  every attempt whose interval can overlap a second of the chunk (in-flight, queue depth);
- ``call_position`` and ``call_last``, per row of ``events``: the attempt's 0-based place
  in its logical call and whether it is the call's last attempt, over the whole run, by
  (start_ns, end_ns, span_id, trace_id) among the run's non-rollup attempts with the same
  ``call_id`` (docs/metrics.md#logical-calls).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl

from tpmledger.durations import MINUTE_NS


@dataclass(frozen=True)
class SealChunk:
    """Attempts of one range of whole minutes ``[low_ns, high_ns)`` (see the module doc)."""

    low_ns: int
    high_ns: int
    events: pl.DataFrame
    reach: pl.DataFrame
    call_position: npt.NDArray[np.int64]
    call_last: npt.NDArray[np.bool_]

    @property
    def minute_count(self) -> int:
        return (self.high_ns - self.low_ns) // MINUTE_NS

    def with_reach(self) -> pl.DataFrame:
        """``events`` then ``reach``: every attempt that can overlap the chunk's seconds."""
        return pl.concat([self.events, self.reach]) if self.reach.height else self.events
