"""Grouped percentiles from one sort are bit-identical to Polars' per-group quantile."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from analytics.event_plans import prepared
from analytics.group_quantiles import (
    grouped_integer_quantiles,
    grouped_quantiles,
    overall_quantiles,
    rank_values,
    ranked_by_integers,
)
from analytics.minute_percentiles import latency_seconds

QUANTILES = [0.0, 0.25, 0.5, 0.95, 0.99, 1.0, 1 / 3]
# Few distinct values (ties), negatives, tiny and large magnitudes.
VALUES = st.one_of(
    st.sampled_from([0.0, -0.0, 0.1, 0.5, 1.0, 2.5]),
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False),
)
ROWS = st.lists(
    st.tuples(st.integers(0, 6), st.one_of(st.none(), VALUES)), min_size=0, max_size=300
)


def _same(expected: float | None, actual: float | None) -> bool:
    if expected is None or actual is None:
        return expected is actual
    return expected == actual or (math.isnan(expected) and math.isnan(actual))


@settings(max_examples=150, deadline=None)
@given(ROWS)
def test_grouped_and_overall_match_polars(rows: list[tuple[int, float | None]]) -> None:
    groups = np.array([g for g, _ in rows], dtype=np.int64)
    frame = pl.DataFrame(
        {"g": groups, "v": [v for _, v in rows]}, schema={"g": pl.Int64, "v": pl.Float64}
    )
    values = frame.get_column("v").fill_null(0.0).to_numpy()
    ranked = rank_values(values, frame.get_column("v").is_not_null().to_numpy())
    figures, has = grouped_quantiles(ranked, groups, 7, QUANTILES)
    expected = frame.group_by("g").agg(
        [
            pl.col("v").quantile(q, interpolation="linear").alias(str(i))
            for i, q in enumerate(QUANTILES)
        ]
    )
    for row in expected.iter_rows(named=True):
        for i in range(len(QUANTILES)):
            mine = float(figures[i][row["g"]]) if has[row["g"]] else None
            assert _same(row[str(i)], mine), (row["g"], QUANTILES[i], row[str(i)], mine)
    overall = overall_quantiles(ranked, QUANTILES)
    for q, mine in zip(QUANTILES, overall, strict=True):
        assert _same(frame.get_column("v").quantile(q, interpolation="linear"), mine)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 10**13)), min_size=8, max_size=200))
def test_values_ordered_by_integer_keys_match_polars(rows: list[tuple[int, int]]) -> None:
    # Seconds exactly as the prepared plan computes latency_s, then Polars' quantile.
    # (Polars' kernel multiplies by the reciprocal; below ~4 values it divides.)
    n = len(rows)
    frame = pl.DataFrame(
        {
            "g": [g for g, _ in rows],
            "end_ns": [v for _, v in rows],
            "start_ns": [0] * n,
            **{c: [None] * n for c in ("status", "ttft_s", "resend_count", "call_id")},
        },
        schema_overrides={"status": pl.String, "ttft_s": pl.Float64, "resend_count": pl.Int64},
    ).with_columns(prompt_tokens=0, completion_tokens=0, span_id=pl.col("call_id"))
    plan = prepared(frame.lazy(), measured=False, all_resend_known=True).collect()
    ns, seconds = frame.get_column("end_ns").to_numpy(), plan.get_column("latency_s")
    assert (seconds.to_numpy() == latency_seconds(ns)).all()
    groups = frame.get_column("g").to_numpy()
    figures, has = grouped_quantiles(
        ranked_by_integers(ns, seconds.to_numpy()), groups, 4, [0.5, 0.99]
    )
    by_keys = grouped_integer_quantiles(ns, groups, 4, [0.5, 0.99], latency_seconds)
    assert by_keys is not None
    expected = plan.group_by("g").agg(
        p50=pl.col("latency_s").quantile(0.5, interpolation="linear"),
        p99=pl.col("latency_s").quantile(0.99, interpolation="linear"),
    )
    for g, p50, p99 in expected.iter_rows():
        assert has[g] and by_keys[1][g]
        assert (figures[0][g], figures[1][g]) == (p50, p99)
        assert (by_keys[0][0][g], by_keys[0][1][g]) == (p50, p99)


def test_integer_keys_that_could_overflow_or_are_negative_fall_back() -> None:
    groups = np.array([0, 1], dtype=np.int64)
    huge = np.array([0, 2**61], dtype=np.int64)
    assert grouped_integer_quantiles(huge, groups, 4, [0.5], latency_seconds) is None
    negative = np.array([-1, 5], dtype=np.int64)
    assert grouped_integer_quantiles(negative, groups, 2, [0.5], latency_seconds) is None


def test_group_without_values_is_flagged_and_overall_is_none() -> None:
    ranked = rank_values(np.array([1.0, 0.0]), np.array([True, False]))
    figures, has = grouped_quantiles(ranked, np.array([0, 1], dtype=np.int64), 3, [0.5])
    assert has.tolist() == [True, False, False]
    assert figures[0][0] == 1.0
    empty = rank_values(np.array([0.0]), np.array([False]))
    assert overall_quantiles(empty, [0.5, 0.99]) == [None, None]
