"""Memory of one live update's steps over a busy minute's window (issue 29 item 3).

    .venv/bin/python bench/live_window_copies.py [--attempts 900000] [--new 7500]

At 15,000 spans/s a minute holds ~900,000 attempts; the analytics worker keeps them (the
run cache) and recomputes the minute from them on every update. This builds such a window
in memory (synthetic values, the live window's columns) and prints the RSS each step adds
over the window itself: settling the probed flags of the ``--new`` attempts as a whole-
window ``DataFrame.update`` (the old way) and as ``_settle_flags`` (the new way), then the
minute rows, the run facts and the extras. Peaks are sampled every 5 ms in this process.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from collections.abc import Callable

import numpy as np
import polars as pl

from tpmledger.analytics.live.live_minutes import live_minute_rows, run_minute_facts
from tpmledger.analytics.live.live_updater import _FLAGS, _KEYS, _settle_flags
from tpmledger.analytics.live.minute_extras import minute_extras

MINUTE_NS = 60_000_000_000
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
    old = pl.int_range(pl.len()) < n - new
    return frame.with_columns(
        *(pl.when(old).then(0).otherwise(None).cast(whole).alias(f) for f in _FLAGS),
        run_id=pl.lit("bench"),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=900_000)
    parser.add_argument("--new", type=int, default=7_500)
    args = parser.parse_args()
    minute = 1_800_000_000_000_000_000 // MINUTE_NS * MINUTE_NS
    window = _window(args.attempts, args.new, minute)
    missing = window.with_row_index("_row").filter(pl.col("rollup").is_null())
    probed = missing.select(_KEYS).with_columns(
        rollup=pl.lit(0, pl.Int32), later_in_call=pl.lit(1, pl.Int32), has_later=pl.lit(0, pl.Int32)
    )
    small = window.head(1000)  # compile and warm everything first
    live_minute_rows(small, [minute], {}), run_minute_facts(small, [minute])
    minute_extras(small, [minute])
    sampler = _Peak()
    sampler.start()
    print(
        f"window: {args.attempts:,} attempts, {window.estimated_size() / 2**20:,.0f} MiB of "
        f"columns; {args.new:,} new"
    )
    steps: list[tuple[str, Callable[[], object]]] = [
        ("flags by DataFrame.update (before)", lambda: window.update(probed, on=_KEYS, how="left")),
        ("flags by _settle_flags (after)", lambda: _settle_flags(window, missing, probed)),
        ("live_minute_rows", lambda: live_minute_rows(window, [minute], {})),
        ("run_minute_facts", lambda: run_minute_facts(window, [minute])),
        ("minute_extras", lambda: minute_extras(window, [minute])),
    ]
    for name, step in steps:
        time.sleep(1.5)  # jemalloc hands freed pages back after 0.5-1 s (polars' setting)
        base = _rss_mib()
        sampler.peak = base
        result = step()
        time.sleep(0.02)
        print(f"  {name}: +{sampler.peak - base:,} MiB peak")
        del result
    sampler.done = True
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
