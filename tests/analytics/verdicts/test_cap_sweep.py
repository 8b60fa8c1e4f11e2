"""The cap-sweep walk and knee (docs/metrics.md), and load_sweep over sealed snapshots."""

from __future__ import annotations

import pytest

from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, MINUTE_NS, attempt_row
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.analytics.verdicts.cap_sweep import (
    SweepPoint,
    SweepThresholds,
    load_sweep,
    walk_caps,
    walk_label,
)
from tpmledger.storage.server.database import in_one_snapshot

RULE = SweepThresholds()


def point(cap: int, tpm: float | None, retry: float | None, success: float | None) -> SweepPoint:
    return SweepPoint(cap, f"run-{cap}", tpm, retry, success, 0.3)


def test_knee_is_last_cap_before_throughput_flattens() -> None:
    points = [
        point(16, 1500, 0.015, 0.99),
        point(4, 1000, 0.01, 0.99),
        point(32, 1520, 0.015, 0.99),  # +1.3 %: rejected
        point(64, 3000, 0.015, 0.99),  # never reached
    ]
    walked, knee = walk_caps(points, RULE)
    assert knee == 16
    assert [(p.cap, p.accepted) for p in walked] == [(4, True), (16, True), (32, False), (64, None)]
    assert "needs > +2.0%" in walked[2].reason


def test_a_live_cap_is_never_called_rejected() -> None:
    """Issue 37: a just-started cap was listed as "rejected: throughput not measured"."""
    from dataclasses import replace

    walked, _ = walk_caps([point(4, 1000, 0.01, 0.99), point(8, None, None, None)], RULE)
    sealed = walk_label(walked[1])
    assert sealed.startswith("rejected: ")
    live = walk_label(replace(walked[1], status="live"))
    assert "rejected" not in live
    assert live.startswith("not accepted so far (live, provisional): ")
    assert walk_label(replace(walked[0], status="live")).startswith("accepted so far (live")


def test_retry_rise_and_success_drop_reject() -> None:
    _, knee = walk_caps([point(4, 1000, 0.01, 0.99), point(8, 2000, 0.021, 0.99)], RULE)
    assert knee == 4  # retry rate +1.1 points
    _, knee = walk_caps([point(4, 1000, 0.01, 0.99), point(8, 2000, 0.02, 0.99)], RULE)
    assert knee == 8  # exactly +1 point is allowed
    walked, knee = walk_caps([point(4, 1000, 0.01, 0.99), point(8, 2000, 0.01, 0.984)], RULE)
    assert knee == 4 and "success rate -0.60 points" in walked[1].reason


def test_unmeasured_retry_cannot_veto_but_unknown_throughput_rejects() -> None:
    walked, knee = walk_caps([point(4, 1000, None, 0.99), point(8, 2000, None, 0.99)], RULE)
    assert knee == 8 and "retry rate not measured" in walked[1].reason
    _, knee = walk_caps([point(4, 1000, None, 0.99), point(8, None, None, 0.99)], RULE)
    assert knee == 4
    assert walk_caps([], RULE) == ([], None)


def test_thresholds_are_parameters() -> None:
    points = [point(4, 1000, 0.01, 0.99), point(8, 1030, 0.01, 0.99)]
    assert walk_caps(points, RULE)[1] == 8
    assert walk_caps(points, SweepThresholds(min_throughput_gain=0.05))[1] == 4


@pytest.mark.slow
def test_load_sweep_reads_latest_snapshots(database_url: str) -> None:
    for cap, per_minute in ((2, 1), (4, 3)):
        rows = [
            attempt_row(
                run_id=f"s{cap}",
                sweep_id="sweep-1",
                concurrency_cap=cap,
                start_ns=BASE_NS + m * MINUTE_NS + k * 1_000_000_000,
                end_ns=BASE_NS + m * MINUTE_NS + k * 1_000_000_000 + 500_000_000,
            )
            for m in range(3)
            for k in range(per_minute)
        ]
        store(database_url, rows)
    store(database_url, [attempt_row(run_id="unsealed", sweep_id="sweep-1", concurrency_cap=8)])
    seal_run(database_url, "s2")
    seal_run(database_url, "s4")
    result = in_one_snapshot(database_url, load_sweep, "sweep-1")
    assert [(p.cap, p.sustained_tpm_total) for p in result.points] == [(2, 150), (4, 450)]
    assert result.knee_cap == 4
    assert result.skipped_run_ids == ["unsealed"]
    assert result.as_dict()["thresholds"] == RULE.as_dict()


def _cap_run(url: str, run_id: str, cap: int, per_minute: int) -> None:
    rows = [
        attempt_row(
            run_id=run_id,
            sweep_id="sweep-2",
            concurrency_cap=cap,
            start_ns=BASE_NS + m * MINUTE_NS + k * 1_000_000_000,
            end_ns=BASE_NS + m * MINUTE_NS + k * 1_000_000_000 + 500_000_000,
        )
        for m in range(3)
        for k in range(per_minute)
    ]
    store(url, rows)


def test_a_live_cap_makes_the_recommendation_provisional(database_url: str) -> None:
    _cap_run(database_url, "c2", 2, 1)
    seal_run(database_url, "c2")
    _cap_run(database_url, "c4", 4, 3)  # still running: only live figures
    LiveUpdater(database_url).update_once()
    result = in_one_snapshot(database_url, load_sweep, "sweep-2")
    assert [(p.cap, p.status, p.sustained_tpm_total) for p in result.points] == [
        (2, "sealed", 150),
        (4, "live", 450),
    ]
    assert result.provisional and result.as_dict()["provisional"] is True
    # `analyze` of the running cap seals a snapshot that is not final: still live.
    seal_run(database_url, "c4", quiet_s=3600)
    assert in_one_snapshot(database_url, load_sweep, "sweep-2").points[1].status == "live"
    # Sealed once quiet: final, and the recommendation is no longer provisional.
    seal_run(database_url, "c4", force=True)
    final = in_one_snapshot(database_url, load_sweep, "sweep-2")
    assert [p.status for p in final.points] == ["sealed", "sealed"]
    assert not final.provisional and final.knee_cap == 4
