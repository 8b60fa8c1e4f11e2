"""The live loop yields to a saturated ingest (docs/metrics.md#live-figures).

While ingest's writer commits back to back (a backfill, a replay, a fleet sending faster
than the server stores), every live update takes CPU from the commits and delays the
senders' 200s. So between updates the loop samples ingest's writer
(:func:`storage.server.ingest_activity.ingest_writing`) and, while it is inside a commit
in nearly every sample, waits, up to ``max_lag_s`` after its last update began: live
figures lag by at most that (plus one update), their ``data_as_of`` says by how much, and
the next update folds every commit queued meanwhile at once. A writer that pauses at all
(normal traffic, the end of a burst) is not saturated: the update runs at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg

from tpmledger.storage.server.ingest_activity import ingest_writing

__all__ = ["BUSY_SAMPLES", "SAMPLES", "ingest_saturated", "yield_to_ingest"]

#: Samples per look, this far apart; saturated when at least BUSY_SAMPLES find a commit
#: running (a writer busy 90 % of the time passes 99.8 % of looks, one busy half of the
#: time 38 %, a third of the time 7 %, a fifth of the time under 1 %): a false look costs
#: one look's wait, half a second.
SAMPLES = 10
BUSY_SAMPLES = 6
SAMPLE_GAP_S = 0.05


def ingest_saturated(conn: psycopg.Connection, stop: threading.Event) -> bool:
    """Whether ingest's writer was inside a commit in at least :data:`BUSY_SAMPLES` of
    :data:`SAMPLES` samples of ``conn`` (autocommit); stops sampling as soon as the answer
    is known. A failed sample is not saturation (the update that follows reports it)."""
    busy = 0
    for taken in range(SAMPLES):
        if taken and stop.wait(SAMPLE_GAP_S):
            return False
        try:
            busy += ingest_writing(conn)
        except psycopg.Error:
            return False
        if busy + SAMPLES - 1 - taken < BUSY_SAMPLES:
            return False
        if busy >= BUSY_SAMPLES:
            return True
    return False


def yield_to_ingest(
    saturated: Callable[[], bool],
    stop: threading.Event,
    since: float,
    max_lag_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> float:
    """Wait while ``saturated()`` says so, until ``max_lag_s`` after ``since`` (a
    ``clock`` reading: when the last update began) or ``stop``; returns the seconds
    waited. ``max_lag_s`` 0 never waits."""
    began = clock()
    while max_lag_s > 0 and not stop.is_set() and clock() - since < max_lag_s:
        if not saturated():
            break
    return clock() - began
