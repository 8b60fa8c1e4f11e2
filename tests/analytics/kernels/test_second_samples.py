"""The per-second samples' one formula against its definition (docs/metrics.md#concurrency):
attempt i is in flight at whole second t when start ≤ t·1 s < end, queued when
start − round(wait) ≤ t·1 s < start, counted in its row, within any window."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tpmledger.analytics.kernels.second_samples import FAR_BEFORE, sample_bounds, window_samples

S = 1_000_000_000
T0 = 1_800_000_000 * S

ATTEMPTS = st.lists(
    st.tuples(
        st.integers(0, 2),  # row
        st.integers(-5 * S, 200 * S),  # start, from T0
        st.integers(-30 * S, 90 * S),  # duration (negative: ends before it starts)
        st.one_of(
            st.just(-1.0),  # no queue
            st.just(float("nan")),
            st.floats(0, 100, allow_nan=False),
            st.just(1e10),  # beyond any grid
        ),
    ),
    max_size=30,
)


def _count(rows: list[tuple[int, int, int]], row: int, t_ns: int) -> int:
    return sum(r == row and low <= t_ns < high for r, low, high in rows)


@settings(max_examples=150, deadline=None)
@given(ATTEMPTS, st.integers(-10, 250), st.integers(1, 130))
def test_samples_count_the_attempts_covering_each_second(
    attempts: list[tuple[int, int, int, float]], offset: int, width: int
) -> None:
    codes = np.array([a[0] for a in attempts], dtype=np.int64)
    start = np.array([T0 + a[1] for a in attempts], dtype=np.int64)
    end = start + np.array([a[2] for a in attempts], dtype=np.int64)
    wait = np.array([a[3] for a in attempts], dtype=np.float64)
    began, ended, queued = sample_bounds(start, end, wait)
    first = T0 // S + offset
    flight = window_samples(codes, began, ended, 3, first, width)
    depth = window_samples(codes, queued, began, 3, first, width)
    assert flight.shape == depth.shape == (3, width)
    spans = [(int(c), int(s), int(e)) for c, s, e in zip(codes, start, end, strict=True)]
    queues = []
    for c, s, w in zip(codes, start, wait, strict=True):
        if w >= 0:  # NaN and negative: no queue
            waited = round(w * S)  # half to even, as np.rint
            queues.append((int(c), int(s) - waited if waited < 2**62 else -(2**63), int(s)))
    for row in range(3):
        for column in range(width):
            t_ns = (first + column) * S
            assert flight[row, column] == _count(spans, row, t_ns), (row, column)
            assert depth[row, column] == _count(queues, row, t_ns), (row, column)
    assert np.all(queued[wait > 1e9] == FAR_BEFORE)
