"""Time the live path's per-second sampling: ``fold_overlap`` of a page of attempts into
four live minutes (the in-flight and queue samples of every shard and target).

    .venv/bin/python bench/live_fold.py [--rows 50000] [--repeat 30] [--seed 38]

Attempts: 8 shards, 3 (provider, model) targets, ends over four minutes, durations up to
90 s (many cross a minute), 50 % reporting a queue wait up to 30 s. Prints the best and the
median wall time of ``--repeat`` folds into fresh minute states (the first fold, which
pays imports and caches, is not counted).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import polars as pl

from tpmledger.analytics.live.minute_state import MinuteState, fold_overlap
from tpmledger.durations import MINUTE_NS, SECOND_NS

BASE_NS = 1_800_000_000_000_000_000 // MINUTE_NS * MINUTE_NS


def _attempts(rows: int, seed: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    end = BASE_NS + rng.integers(-20 * SECOND_NS, 4 * MINUTE_NS, rows)
    targets = [("p", "m"), ("p", "n"), (None, "m")]
    pick = rng.integers(0, len(targets), rows)
    return pl.DataFrame(
        {
            "shard_id": rng.choice([str(s) for s in range(8)], rows).tolist(),
            "start_ns": end - rng.integers(1, 90 * SECOND_NS, rows),
            "end_ns": end,
            "queue_wait_s": pl.Series(np.round(rng.random(rows) * 30, 3)).scatter(
                np.flatnonzero(rng.random(rows) < 0.5), None
            ),
            "rollup": np.zeros(rows, np.int64),
            "provider": pl.Series([targets[i][0] for i in pick], dtype=pl.String),
            "model": pl.Series([targets[i][1] for i in pick], dtype=pl.String),
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--seed", type=int, default=38)
    args = parser.parse_args()
    attempts = _attempts(args.rows, args.seed)
    minutes = [BASE_NS + i * MINUTE_NS for i in range(4)]
    times = []
    for attempt in range(args.repeat + 1):
        states = {m: MinuteState(m) for m in minutes}
        began = time.perf_counter()
        fold_overlap(states, attempts)
        if attempt:
            times.append(time.perf_counter() - began)
    flight = sum(int(s.sum()) for state in states.values() for s in state.flight.values())
    print(
        f"fold_overlap, {args.rows:,} attempts into 4 minutes: best {min(times) * 1e3:.2f} ms, "
        f"median {statistics.median(times) * 1e3:.2f} ms of {args.repeat} "
        f"(in-flight samples summed: {flight:,})"
    )


if __name__ == "__main__":
    main()
