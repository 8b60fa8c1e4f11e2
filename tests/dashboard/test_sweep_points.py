"""The knee rule of SPEC §4 and the sweep view read from snapshots."""

from __future__ import annotations

from dashboard.data.sweep_points import KneeThresholds, SweepPoint, find_knee, load_sweep_view
from tests.dashboard.builders import seed_sweep


def _p(
    cap: int, tpm: float | None, retry: float | None = 0.0, ok: float | None = 1.0
) -> SweepPoint:
    return SweepPoint(cap, f"r{cap}", tpm, retry, ok, None)


RULE = KneeThresholds()


def test_knee_is_the_last_cap_whose_throughput_still_rose_enough() -> None:
    points = [_p(4, 1000), _p(8, 1900), _p(16, 3000), _p(32, 3050), _p(64, 6000)]
    # 32 gains only 1.7 % (< 2 %), so walking stops there even though 64 rises again.
    assert find_knee(points, RULE) == 16


def test_retry_rise_or_success_drop_stops_the_walk() -> None:
    assert find_knee([_p(4, 1000, 0.0), _p(8, 2000, 0.011)], RULE) == 4
    assert find_knee([_p(4, 1000, 0.0), _p(8, 2000, 0.01)], RULE) == 8
    assert find_knee([_p(4, 1000, ok=1.0), _p(8, 2000, ok=0.994)], RULE) == 4


def test_unmeasured_rates_do_not_veto_and_no_points_no_knee() -> None:
    assert find_knee([_p(4, 1000, None, None), _p(8, 2000, None, None)], RULE) == 8
    assert find_knee([], RULE) is None


def test_sweep_view_from_sealed_runs(database_url: str) -> None:
    seed_sweep(database_url, "sw", caps=[8, 4, 16], tpm=[2000, 1000, 2010], retry=[0, 0, 0])
    view = load_sweep_view(database_url, "sw")
    assert [p.cap for p in view.points] == [4, 8, 16]
    assert view.knee_cap == 8
    assert view.thresholds.as_dict() == {
        "min_throughput_gain": 0.02,
        "max_retry_rate_rise": 0.01,
        "max_success_rate_drop": 0.005,
    }
