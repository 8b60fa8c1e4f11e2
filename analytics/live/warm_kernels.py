"""Load the live path's compiled kernels into this process before a run's data arrives.

The worker's child fills Numba's on-disk cache at start (:func:`analytics.worker.warm_in_child`),
but each process still loads every kernel it calls from that cache on first use, and
Numba sets itself up on the first one: about a CPU-second on the 2-core machine. Done by
the live path's first update, that second is taken from the burst of spans that started
it (issue 39: a fresh ``tpmledger up`` receiving a backfill). So the live loop, when it
is idle and the kernels are ready, runs one update's computations on two synthetic
attempts: it reads an empty binary COPY, folds the attempts into two minutes' states and
computes those minutes' rows, facts, targets and extras. Nothing is written anywhere.
"""

from __future__ import annotations

import logging
import time

import polars as pl

from tpmledger.analytics.live.minute_state import MinuteState, fold_ending, fold_overlap
from tpmledger.analytics.live.minute_state_figures import (
    minute_extras,
    minute_facts,
    minute_rows,
    minute_targets,
)
from tpmledger.durations import MINUTE_NS, SECOND_NS
from tpmledger.storage.codecs.binary_copy import SIGNATURE, parse_binary_copy
from tpmledger.storage.readers.commit_rows import FLAGS
from tpmledger.storage.readers.live_window import LIVE_WINDOW_KINDS

log = logging.getLogger("tpmledger.analytics")

# A minute well in the past: the attempts are never confused with a run's.
_MINUTE = 1_769_917_440 * 1_000_000_000 // MINUTE_NS * MINUTE_NS
_EMPTY_COPY = SIGNATURE + bytes(8) + b"\xff\xff"  # a binary COPY of no rows


def synthetic_attempts() -> pl.DataFrame:
    """Two attempts of one explicit call, as the live path reads them (the live window
    columns, ``run_id`` and the flags): a timed-out first try that queued, and a retry
    with tokens and TTFT ending in the next minute."""
    first_end = _MINUTE + 30 * SECOND_NS
    values: dict[str, list[object]] = {
        "trace_id": ["0" * 32, "0" * 31 + "1"],
        "span_id": ["0" * 16, "0" * 15 + "1"],
        "shard_id": ["0", "1"],
        "status": ["error", "ok"],
        "start_ns": [first_end - 20 * SECOND_NS, first_end + SECOND_NS],
        "end_ns": [first_end, _MINUTE + MINUTE_NS + 5 * SECOND_NS],
        "queue_wait_s": [0.5, None],
        "ttft_s": [None, 0.25],
        "prompt_tokens": [None, 120],
        "completion_tokens": [None, 40],
        "resend_count": [None, 1],
        "concurrency_cap": [4, 4],
        "call_id_explicit": [1, 1],
        "error_type": ["timeout", None],
        "deadline_text": ["30", None],
        "timeout_text": [None, "60"],
        "provider": ["openai", "openai"],
        "model": ["m", "m"],
        "target_cap_text": ["8", None],
        "cache_read_tokens": [None, 10],
        "cache_write_tokens": [None, None],
        "reasoning_tokens": [None, 5],
        "run_id": ["warm-up", "warm-up"],
        "rollup": [0, 0],
        "later_in_call": [0, 1],
        "has_later": [1, 0],
    }
    # The columns' types as a read gives them: those of an empty read.
    schema = dict(parse_binary_copy(bytearray(_EMPTY_COPY), LIVE_WINDOW_KINDS).schema)
    schema |= {"run_id": pl.String(), **dict.fromkeys(FLAGS, pl.Int64())}
    return pl.DataFrame(values, schema=schema)


def load_live_kernels() -> float:
    """Run one live update's computations on :func:`synthetic_attempts` (loading every
    kernel they call into this process); returns the CPU seconds it took."""
    started = time.process_time()
    rows = synthetic_attempts()  # reads an empty binary COPY first
    states = {m: MinuteState(m) for m in (_MINUTE, _MINUTE + MINUTE_NS)}
    fold_ending(states, rows)
    fold_overlap(states, rows)
    minute_rows(list(states.values()), {})
    for state in states.values():
        minute_facts(state, None)
        minute_targets(state)
        minute_extras(state)
    return time.process_time() - started
