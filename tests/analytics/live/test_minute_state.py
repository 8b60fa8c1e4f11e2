"""Per-minute state gives the rows, facts and extras the window recomputation gave.

the window recomputation (tests/analytics/oracle/live_window.py) (and ``run_minute_facts``,
``minute_extras``) recompute a range of minutes from every attempt ending in or
overlapping it; :mod:`analytics.live.minute_state` folds the same attempts into per-minute
state, in pages, and computes the minutes from it. On random windows (rollups, retries,
queue waits, deadlines, several shards and minutes, intervals crossing minutes) both
must give the same rows to the bit, the same extras, and the same facts (float sums up
to the order of additions).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import polars as pl
import pytest

from tests.analytics.oracle.live_window import live_minute_rows, minute_extras, run_minute_facts
from tpmledger.analytics.live.minute_state import MinuteState, fold_ending, fold_overlap
from tpmledger.analytics.live.minute_state_figures import minute_extras as state_extras
from tpmledger.analytics.live.minute_state_figures import minute_facts, minute_rows

MINUTE = 60_000_000_000
BASE = 1_800_000_000_000_000_000 // MINUTE * MINUTE


def _window(seed: int, n: int) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    end = BASE + rng.integers(-20 * 10**9, 4 * MINUTE, n)
    start = end - rng.integers(1, 90 * 10**9, n)
    maybe = rng.random((8, n))
    ok = maybe[0] < 0.8
    return pl.DataFrame(
        {
            "trace_id": [f"{i:032x}" for i in range(n)],
            "span_id": [f"{i:016x}" for i in range(n)],
            "shard_id": rng.choice(["0", "1", "10", "b"], n).tolist(),
            "status": np.where(ok, "ok", "error").tolist(),
            "start_ns": start,
            "end_ns": end,
            "queue_wait_s": pl.Series(np.round(rng.random(n) * 30, 3)).scatter(
                np.flatnonzero(maybe[1] < 0.5), None
            ),
            "ttft_s": pl.Series(rng.random(n)).scatter(np.flatnonzero(maybe[2] < 0.3), None),
            "prompt_tokens": rng.integers(0, 500, n),
            "completion_tokens": pl.Series(rng.integers(0, 500, n)).scatter(
                np.flatnonzero(maybe[3] < 0.1), None
            ),
            "resend_count": pl.Series(rng.integers(0, 3, n)).scatter(
                np.flatnonzero(maybe[4] < 0.6), None
            ),
            "concurrency_cap": pl.Series(rng.choice([2, 4, 8], n)).scatter(
                np.flatnonzero(maybe[5] < 0.7), None
            ),
            "call_id_explicit": (maybe[6] < 0.5).astype(np.int64),
            "error_type": pl.Series(rng.choice(["timeout", "rate_limit"], n)).scatter(
                np.flatnonzero(ok | (maybe[7] < 0.2)), None
            ),
            "deadline_text": pl.Series(
                rng.choice(["", "0.5", "20", "soon"], n, p=[0.7, 0.1, 0.1, 0.1]).tolist()
            ).replace("", None),
            "timeout_text": pl.Series(
                rng.choice(["", "30", " 90 "], n, p=[0.6, 0.2, 0.2]).tolist()
            ).replace("", None),
            "cache_read_tokens": pl.Series(rng.integers(0, 9, n)).scatter(
                np.flatnonzero(maybe[1] < 0.8), None
            ),
            "cache_write_tokens": pl.Series([None] * n, dtype=pl.Int64),
            "reasoning_tokens": pl.Series(rng.integers(0, 9, n)).scatter(
                np.flatnonzero(maybe[2] < 0.5), None
            ),
            "run_id": ["r"] * n,
            "rollup": (rng.random(n) < 0.1).astype(np.int64),
            "later_in_call": (rng.random(n) < 0.2).astype(np.int64),
            "has_later": (rng.random(n) < 0.2).astype(np.int64),
        }
    ).with_columns(
        pl.col("concurrency_cap", "resend_count").cast(pl.Int64),
    )


def _states(window: pl.DataFrame, minutes: list[int], pages: int) -> list[MinuteState]:
    states = {m: MinuteState(m) for m in minutes}
    for page in window.sample(fraction=1.0, shuffle=True, seed=pages).iter_slices(
        max(1, window.height // pages)
    ):
        fold_ending(states, page)
        fold_overlap(states, page)
    return [states[m] for m in minutes]


def _same(have: Any, want: Any) -> None:
    if isinstance(want, float):
        assert have == pytest.approx(want, rel=1e-9, abs=1e-9)
    elif isinstance(want, dict):
        assert have.keys() == want.keys()
        for key in want:
            if key == "counts":  # sketch bins: exact
                assert have[key] == want[key]
            else:
                _same(have[key], want[key])
    else:
        assert have == want


@pytest.mark.parametrize("seed", range(12))
def test_state_gives_the_windows_rows_facts_and_extras(seed: int) -> None:
    window = _window(seed, 400 + 150 * seed)
    minutes = [BASE + i * MINUTE for i in range(seed % 3, 4)]
    caps = {"0": 4} if seed % 2 else {}
    states = _states(window, minutes, pages=1 + seed % 5)
    want = live_minute_rows(window, minutes, caps)
    have = minute_rows(states, caps)
    # Rows for shards with something in the minute; the window adds zero rows for shards
    # it saw elsewhere (the read side shows a missing row as the same empty row).
    key = ["shard_id", "minute_ns"]
    assert set(have.select(key).iter_rows()) <= set(want.select(key).iter_rows())
    joined = want.join(have, on=key, how="left", suffix="_state")
    for row in joined.iter_rows(named=True):
        if row["calls_in_minute_state"] is None:  # a zero row of the window only
            assert row["calls_in_minute"] == 0 and row["in_flight_max"] == 0
            assert row["queue_depth_max"] == 0
            continue
        for column in want.columns:
            if column in key or column == "sag_cap":
                continue
            assert row[f"{column}_state"] == row[column], (row["shard_id"], column)
    run_timeout = 40.0 if seed % 2 else None
    facts = run_minute_facts(window, minutes, run_timeout)
    for state, expected in zip(states, facts, strict=True):
        got = minute_facts(state, run_timeout)
        # The diagnostics' sums are checked against the seal (test_live_diagnostics.py).
        del got["tools"], got["targets"]
        got["retry_causes"], expected["retry_causes"] = (
            json.dumps(got["retry_causes"], sort_keys=True),
            json.dumps(expected["retry_causes"], sort_keys=True),
        )
        _same(got, expected)
    extras = [e for s in states for e in state_extras(s)]
    assert sorted(extras) == sorted(minute_extras(window, minutes))


@pytest.mark.parametrize("seed", range(4))
def test_taking_rows_away_gives_the_facts_of_the_rows_left(seed: int) -> None:
    # Rows whose flags changed are taken away and folded again: a cause whose count
    # falls back to zero is gone from the facts, as the window never had it.
    window = _window(seed, 300)
    minutes = [BASE + i * MINUTE for i in range(4)]
    states = {m: MinuteState(m) for m in minutes}
    fold_ending(states, window)
    retried_failures = (pl.col("has_later") == 1) & (pl.col("call_id_explicit") == 1)
    taken = window.filter(retried_failures)
    assert taken.height > 0
    fold_ending(states, taken, sign=-1)
    left = window.filter(~retried_failures)
    facts = run_minute_facts(left, minutes, None)
    for minute, expected in zip(minutes, facts, strict=True):
        assert minute_facts(states[minute], None)["retry_causes"] == expected["retry_causes"]
