"""Grouped percentiles are bit-identical to Polars' per-group quantile; grouped means and
variances agree with Polars and do not depend on the input order."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from tpmledger.analytics.kernels.event_arrays import latency_seconds
from tpmledger.analytics.kernels.event_plans import prepared
from tpmledger.analytics.kernels.group_quantiles import (
    concatenated,
    group_moments,
    group_quantiles,
    merged,
    sort_groups,
)

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


def _close(expected: float, actual: float) -> bool:
    return math.isclose(expected, actual, rel_tol=1e-12, abs_tol=1e-9)


@settings(max_examples=150, deadline=None)
@given(ROWS)
def test_grouped_and_overall_match_polars(rows: list[tuple[int, float | None]]) -> None:
    groups = np.array([g for g, _ in rows], dtype=np.int64)
    frame = pl.DataFrame(
        {"g": groups, "v": [v for _, v in rows]}, schema={"g": pl.Int64, "v": pl.Float64}
    )
    values = frame.get_column("v").fill_null(0.0).to_numpy()
    valid = frame.get_column("v").is_not_null().to_numpy()
    sorted_groups = sort_groups(values, valid, groups, 7)
    figures, has = group_quantiles(sorted_groups, QUANTILES)
    mean, variance = group_moments(sorted_groups)
    expected = frame.group_by("g").agg(
        *[
            pl.col("v").quantile(q, interpolation="linear").alias(str(i))
            for i, q in enumerate(QUANTILES)
        ],
        mean=pl.col("v").mean(),
        var=pl.col("v").var(ddof=0),
    )
    for row in expected.iter_rows(named=True):
        g = row["g"]
        for i in range(len(QUANTILES)):
            mine = float(figures[i][g]) if has[g] else None
            assert _same(row[str(i)], mine), (g, QUANTILES[i], row[str(i)], mine)
        if has[g]:
            assert _close(row["mean"], mean[g]) and _close(row["var"], variance[g])
        else:
            assert math.isnan(mean[g]) and math.isnan(variance[g])
    whole = merged(sorted_groups)
    overall, _ = group_quantiles(whole, QUANTILES)
    for q, mine in zip(QUANTILES, overall, strict=True):
        expected_q = frame.get_column("v").quantile(q, interpolation="linear")
        assert _same(expected_q, float(mine[0]) if whole.values.size else None)


@settings(max_examples=60, deadline=None)
@given(ROWS, st.randoms(use_true_random=False))
def test_moments_do_not_depend_on_input_order(rows: list[tuple[int, float | None]], rnd) -> None:
    shuffled = list(rows)
    rnd.shuffle(shuffled)
    results = []
    for ordering in (rows, shuffled):
        groups = np.array([g for g, _ in ordering], dtype=np.int64)
        values = np.array([v or 0.0 for _, v in ordering], dtype=np.float64)
        valid = np.array([v is not None for _, v in ordering], dtype=np.bool_)
        by_group = sort_groups(values, valid, groups, 7)
        results.append((*group_moments(by_group), *group_moments(concatenated(by_group))))
    for first, second in zip(*results, strict=True):
        assert first.tobytes() == second.tobytes()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(-(10**9), 10**13)), min_size=8, max_size=200)
)
def test_integer_nanoseconds_sorted_as_integers_match_polars_seconds(
    rows: list[tuple[int, int]],
) -> None:
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
    every = np.ones(n, dtype=np.bool_)
    figures, has = group_quantiles(sort_groups(ns, every, groups, 4), [0.5, 0.99], latency_seconds)
    expected = plan.group_by("g").agg(
        p50=pl.col("latency_s").quantile(0.5, interpolation="linear"),
        p99=pl.col("latency_s").quantile(0.99, interpolation="linear"),
    )
    for g, p50, p99 in expected.iter_rows():
        assert has[g]
        assert (figures[0][g], figures[1][g]) == (p50, p99)


def test_group_without_values_is_flagged_and_overall_is_none() -> None:
    groups = sort_groups(
        np.array([1.0, 0.0]), np.array([True, False]), np.array([0, 1], dtype=np.int64), 3
    )
    figures, has = group_quantiles(groups, [0.5])
    assert has.tolist() == [True, False, False]
    assert figures[0][0] == 1.0
    assert groups.nulls.tolist() == [0, 1, 0]
    empty = merged(sort_groups(np.array([0.0]), np.array([False]), np.zeros(1, np.int64), 1))
    figures, has = group_quantiles(empty, [0.5, 0.99])
    assert has.tolist() == [False]
