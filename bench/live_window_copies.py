"""Memory of one live update's steps over a busy minute's window (issue 29 item 3).

    .venv/bin/python bench/live_window_copies.py [--attempts 900000] [--new 7500]

At 15,000 spans/s a minute holds ~900,000 attempts. The analytics worker used to keep them
(the run cache) and recompute the minute from them on every update; it now keeps each
live minute's mergeable state (analytics/live/minute_state.py) and folds the new rows into
it. This builds such a window in memory (synthetic values, the live window's columns) and
prints the RSS each step adds and its time: the state built from the window (its size is
what the worker keeps), ``--new`` attempts folded into it, and the minute's rows, facts and
extras computed from it. Peaks are sampled every 5 ms in this process. The figures of the
old path (the minute recomputed from the whole window: +120 / +54 / +14 MiB per update) are
in bench/results/live_worker_rss.txt; that path is now only the tests' reference.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Callable

import numpy as np
import polars as pl

from tpmledger.analytics.live.minute_state import MinuteState, fold_ending, fold_overlap
from tpmledger.analytics.live.minute_state_figures import minute_extras as state_extras
from tpmledger.analytics.live.minute_state_figures import minute_facts, minute_rows
from tpmledger.durations import MINUTE_NS

_FLAGS = ("rollup", "later_in_call", "has_later")
_TEXTS = ("error_type", "deadline_text", "timeout_text")
_TOKENS = ("cache_read_tokens", "cache_write_tokens", "reasoning_tokens")


def _rss_mib() -> int:
    with open("/proc/self/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0]) // 1024


class _Peak(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak, self.done = 0, False

    def run(self) -> None:
        while not self.done:
            self.peak = max(self.peak, _rss_mib())
            time.sleep(0.005)


def _window(n: int, new: int, minute: int) -> pl.DataFrame:
    rng = np.random.default_rng(1)
    end = minute + np.sort(rng.integers(0, MINUTE_NS, n))
    text, whole = pl.String, pl.Int64
    frame = pl.DataFrame(
        {
            "trace_id": [os.urandom(16).hex() for _ in range(n)],
            "span_id": [os.urandom(8).hex() for _ in range(n)],
            "shard_id": [f"shard-{i % 8:02d}" for i in range(n)],
            "status": ["ok"] * n,
            "start_ns": end - rng.integers(10**8, 5 * 10**9, n),
            "end_ns": end,
            "queue_wait_s": rng.random(n),
            "ttft_s": rng.random(n),
            "prompt_tokens": rng.integers(0, 1000, n),
            "completion_tokens": rng.integers(0, 1000, n),
            "resend_count": pl.Series([None] * n, dtype=whole),
            "concurrency_cap": [8] * n,
            "call_id_explicit": [0] * n,
            **{c: pl.Series([None] * n, dtype=text) for c in _TEXTS},
            **{c: pl.Series([None] * n, dtype=whole) for c in _TOKENS},
        }
    )
    return frame.with_columns(*(pl.lit(0, whole).alias(f) for f in _FLAGS), run_id=pl.lit("b"))


def _built(window: pl.DataFrame, minute: int) -> MinuteState:
    """The minute's state from the window, folded 50,000 rows at a time (as the worker
    reads a minute it holds no state of)."""
    state = MinuteState(minute)
    for page in window.iter_slices(50_000):
        fold_ending({minute: state}, page)
        fold_overlap({minute: state}, page)
    return state


def _emitted(state: MinuteState) -> object:
    return minute_rows([state], {}), minute_facts(state, None), state_extras(state)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=900_000)
    parser.add_argument("--new", type=int, default=7_500)
    args = parser.parse_args()
    minute = 1_800_000_000_000_000_000 // MINUTE_NS * MINUTE_NS
    window = _window(args.attempts, args.new, minute)
    old, new = window.head(args.attempts - args.new), window.tail(args.new)
    small = window.head(1000)  # compile and warm everything first
    _emitted(_built(small, minute))
    state = MinuteState(minute)
    sampler = _Peak()
    sampler.start()
    print(
        f"window: {args.attempts:,} attempts, {window.estimated_size() / 2**20:,.0f} MiB of "
        f"columns; {args.new:,} new"
    )

    def build() -> MinuteState:
        nonlocal state
        state = _built(old, minute)
        return state

    def fold() -> None:
        fold_ending({minute: state}, new)
        fold_overlap({minute: state}, new)

    steps: list[tuple[str, Callable[[], object]]] = [
        ("state built from the window in pages (once)", build),
        (f"{args.new:,} new attempts folded into the state", fold),
        ("rows, facts and extras from the state", lambda: _emitted(state)),
    ]
    for name, step in steps:
        time.sleep(1.5)  # jemalloc hands freed pages back after 0.5-1 s (polars' setting)
        base = _rss_mib()
        sampler.peak = base
        began = time.perf_counter()
        result = step()
        took = time.perf_counter() - began
        time.sleep(0.02)
        print(f"  {name}: +{sampler.peak - base:,} MiB peak, {took * 1000:,.0f} ms")
        del result
    print(
        f"  state kept per minute: {state.nbytes() / 2**20:,.1f} MiB of per-attempt values "
        f"({state.values_held():,} TTFT/latency values) for {args.attempts:,} attempts"
    )
    sampler.done = True
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
