"""Per-minute value summaries: the ddsketch library's bins, exact moments, mergeable
(docs/metrics.md#live-approximations)."""

from __future__ import annotations

import numpy as np
from ddsketch import DDSketch
from ddsketch.mapping import LogarithmicMapping

from tests.analytics.oracle.live_window import _value_summary
from tpmledger.analytics.kernels import value_sketch

ALPHA = value_sketch.RELATIVE_ACCURACY


def _values(seed: int, count: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    values = rng.lognormal(-1.0, 1.2, count)
    values[: count // 50] = 0.0  # some zero latencies (unmappable: the zero count)
    return values


def test_the_owned_mapping_is_the_librarys_own() -> None:
    """Guard: value_sketch owns DDSketch's logarithmic mapping (no private attribute of
    ``ddsketch`` is read); if the library's mapping ever changes, this fails loudly, since
    the stored bins would no longer mean what DDSketch readers take them to mean."""
    mapping = LogarithmicMapping(ALPHA)
    assert mapping.gamma == value_sketch.GAMMA
    assert mapping.min_possible == value_sketch.MIN_MAPPED
    rng = np.random.default_rng(11)
    values = np.concatenate([rng.lognormal(-1.0, 3.0, 20_000), [1e-300, 1e-9, 1.0, 2.0, 1e12]])
    for v in values.tolist():
        assert value_sketch.key(v) == mapping.key(v), v
    for k in range(-2_000, 2_000, 7):
        assert value_sketch.key_value(k) == mapping.value(k), k


def test_bins_and_quantiles_are_the_librarys_own() -> None:
    values = _values(1, 5_000)
    part = _value_summary(values)
    assert part is not None
    reference = DDSketch(ALPHA)
    for v in values:
        reference.add(float(v))
    ours = value_sketch.Summary.from_json(part)
    assert ours.n == reference.count and ours.zero == int((values == 0).sum())
    assert ours.counts.sum() == ours.n - ours.zero
    # Every rank's value, and the library's own (lower) quantiles, are the library's.
    for q in (0.0, 0.01, 0.5, 0.9, 0.999, 1.0):
        rank = q * (ours.n - 1)
        if rank == int(rank):
            assert value_sketch.quantile(ours, q) == reference.get_quantile_value(q), q
    for q in (0.5, 0.95, 0.99):  # interpolated between the library's two ranks
        rank = q * (ours.n - 1)
        low = reference.get_quantile_value(int(rank) / (ours.n - 1))
        high = reference.get_quantile_value(min(int(rank) + 1, ours.n - 1) / (ours.n - 1))
        assert min(low, high) <= value_sketch.quantile(ours, q) <= max(low, high)


def test_merged_minutes_equal_one_summary_of_all_values_and_stay_within_alpha() -> None:
    minutes = [_values(seed, n) for seed, n in ((2, 900), (3, 1), (4, 4_000), (5, 250))]
    parts = [_value_summary(m) for m in minutes]
    merged = value_sketch.merged([*parts, None])
    stored = _value_summary(np.concatenate(minutes))
    assert merged is not None and stored is not None
    whole = value_sketch.Summary.from_json(stored)
    assert (merged.n, merged.zero, merged.offset) == (whole.n, whole.zero, whole.offset)
    assert merged.counts.tolist() == whole.counts.tolist()
    assert np.isclose(merged.m2, whole.m2, rtol=1e-12)
    values = np.concatenate(minutes)
    figures = value_sketch.figures(merged, variance=True)
    assert figures["approximate"] is True and figures["relative_accuracy"] == ALPHA
    for key, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
        exact = float(np.quantile(values, q))  # linear, as the sealed figures
        assert abs(figures[key] - exact) <= ALPHA * exact, key
    assert np.isclose(figures["mean"], values.mean(), rtol=1e-12)
    assert np.isclose(figures["variance"], values.var(), rtol=1e-10)


def test_no_values_is_not_measured() -> None:
    assert _value_summary(np.array([])) is None
    assert value_sketch.merged([None, None]) is None
    empty = value_sketch.figures(None, variance=False)
    assert empty["p95"] is None and empty["mean"] is None and "variance" not in empty
