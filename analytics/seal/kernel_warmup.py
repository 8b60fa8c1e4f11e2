"""Compile every kernel a seal uses once (or load it from Numba's on-disk cache).

The compiled loops of :mod:`storage.codecs.binary_copy`, :mod:`analytics.kernels` (through the
seal's own walk, :func:`~analytics.seal.memory_run.fold_events`) and
:mod:`provenance.line_writer` take several seconds to compile on first use and a
fraction of a second to load from the cache afterwards. The analytics worker warms them
at start and the container image at build time, so no seal waits for them.
"""

from __future__ import annotations

import logging
import time

import polars as pl

from tpmledger.analytics.seal.memory_run import fold_events
from tpmledger.provenance.event_file import build_event_file
from tpmledger.provenance.event_schema import EVENT_SCHEMA
from tpmledger.storage.codecs.binary_copy import SIGNATURE, parse_binary_copy
from tpmledger.storage.readers.attempt_frames import ATTEMPT_COPY_KINDS

log = logging.getLogger("tpmledger.analytics")

_NS = 1_769_917_440 * 1_000_000_000


def _events() -> pl.DataFrame:
    """Two attempts of one call (explicit call id, a queue wait): every kernel path."""
    base = {name: None for name in EVENT_SCHEMA} | {"run_id": "warmup", "shard_id": "0"}
    rows = [
        base
        | {"span_id": "a", "call_id": "c", "start_ns": _NS, "end_ns": _NS + 10**9}
        | {"status": "error", "resend_count": 0, "queue_wait_s": 0.5},
        base
        | {"span_id": "b", "call_id": "c", "start_ns": _NS + 2 * 10**9}
        | {"end_ns": _NS + 3 * 10**9, "status": "ok", "ttft_s": 0.1, "resend_count": 1}
        | {"prompt_tokens": 10, "completion_tokens": 5},
    ]
    return pl.DataFrame(rows, schema=EVENT_SCHEMA)


def warm() -> float:
    """Parse an empty fetch, and run the analytics and the file writer on two events;
    returns the seconds it took."""
    started = time.perf_counter()
    empty = SIGNATURE + bytes(8) + b"\xff\xff"  # no rows
    parse_binary_copy(empty, ATTEMPT_COPY_KINDS)
    # Reads hand the parser a writable buffer (a bytes object is read-only): Numba
    # compiles and caches each variant apart, and the live path's reads take this one.
    parse_binary_copy(bytearray(empty), ATTEMPT_COPY_KINDS)
    events = _events()
    fold_events(events)
    build_event_file(events)
    seconds = time.perf_counter() - started
    log.info("analytics kernels ready in %.1fs", seconds)
    return seconds


if __name__ == "__main__":
    print(f"analytics kernels ready in {warm():.1f}s")
