"""Compare verdicts on runs built with known properties (real PostgreSQL, sealed rows)."""

from __future__ import annotations

import pytest

from tests.analytics.compare_builders import seed_profile
from tests.analytics.seeding import store
from tests.storage.builders import attempt_row
from tpmledger.analytics.verdicts.compare_runs import CompareParams, NotComparable, compare_runs
from tpmledger.slo import parse_slo
from tpmledger.storage.readers.runs_read import UnknownRun
from tpmledger.storage.server.database import in_one_snapshot

BASE = {"calls": 20, "tokens": 100, "retried": 2}


def test_more_throughput_same_retries_is_improved(database_url: str) -> None:
    seed_profile(database_url, "a", **BASE)
    seed_profile(database_url, "b", calls=30, tokens=100, retried=3)
    result = in_one_snapshot(database_url, compare_runs, "a", "b")
    assert result["verdict"] == "improved", result["rule"]
    tpm = result["figures"]["sustained_tpm_total"]
    assert tpm["b"] > tpm["a"] and tpm["interval"][0] > 0
    assert result["figures"]["retry_rate"]["difference"] == 0.0
    assert result["params"]["resamples"] == 2000 and result["params"]["seed"] == 0


def test_a_little_more_throughput_many_more_retries_moved_the_bottleneck(
    database_url: str,
) -> None:
    seed_profile(database_url, "a", **BASE)
    seed_profile(database_url, "b", calls=20, tokens=103, retried=8)
    result = in_one_snapshot(database_url, compare_runs, "a", "b")
    assert result["verdict"] == "moved_the_bottleneck", result["rule"]
    assert "retry rate rose" in result["rule"]
    # Never said without each run's own verdict (none here: no cap, no quota telemetry).
    assert result["bottlenecks"]["a"]["verdict"] is None
    assert result["bottlenecks"]["b"]["reason"]  # what is missing, in words
    assert result["rule"].endswith(
        "each run's own bottleneck verdict: A not measured, B not measured"
    )
    retry = result["figures"]["retry_rate"]
    assert retry["interval"][0] > 0


def test_stalls_rising_faster_than_throughput_moved_the_bottleneck(database_url: str) -> None:
    seed_profile(database_url, "a", **BASE)
    seed_profile(database_url, "b", calls=21, tokens=100, retried=2, stalls=4)
    result = in_one_snapshot(database_url, compare_runs, "a", "b")
    assert result["verdict"] == "moved_the_bottleneck", result["rule"]
    assert "stall rate rose" in result["rule"]
    assert result["figures"]["stall_rate"]["a"] == 0.0


def test_less_throughput_is_regressed(database_url: str) -> None:
    seed_profile(database_url, "a", **BASE)
    seed_profile(database_url, "b", calls=14, tokens=100, retried=1)
    result = in_one_snapshot(database_url, compare_runs, "a", "b")
    assert result["verdict"] == "regressed", result["rule"]
    assert result["figures"]["sustained_tpm_total"]["interval"][1] < 0


def test_a_missing_figure_is_inconclusive_and_named(database_url: str) -> None:
    seed_profile(database_url, "a", **BASE, measured=False)
    seed_profile(database_url, "b", calls=30, tokens=100, retried=3)
    result = in_one_snapshot(database_url, compare_runs, "a", "b")
    assert result["verdict"] == "inconclusive"
    assert result["missing"] == ["retry_rate"]
    assert "retry_rate" in result["rule"] and "'a'" in result["rule"]
    assert result["figures"]["retry_rate"]["interval"] is None


def test_too_few_minutes_is_inconclusive(database_url: str) -> None:
    seed_profile(database_url, "a", **BASE, minutes=3)
    seed_profile(database_url, "b", **BASE)
    result = in_one_snapshot(database_url, compare_runs, "a", "b")
    assert result["verdict"] == "inconclusive"
    assert "sustained_tpm_total" in result["missing"]
    assert "at least 3 are needed" in result["rule"]


def test_throughput_gain_with_falling_goodput_is_not_improved(database_url: str) -> None:
    slo = parse_slo("ttft=0.5")
    seed_profile(database_url, "a", **BASE, slo=slo)
    # More tokens per minute, but every attempt misses the TTFT limit.
    seed_profile(database_url, "b", calls=30, tokens=100, retried=3, ttft_s=0.9, slo=slo)
    assert in_one_snapshot(database_url, compare_runs, "a", "b")["verdict"] == "improved"
    result = in_one_snapshot(database_url, compare_runs, "a", "b", slo_text=slo.text)
    assert result["verdict"] == "inconclusive"
    assert "goodput fell" in result["rule"]
    assert result["figures"]["goodput_tpm_total"]["b"] == 0.0
    assert result["params"]["slo"] == "ttft=0.5"


@pytest.mark.slow
def test_seeded_results_repeat_and_parameters_change_them(database_url: str) -> None:
    seed_profile(database_url, "a", **BASE)
    seed_profile(database_url, "b", calls=22, tokens=100, retried=2)
    first = in_one_snapshot(database_url, compare_runs, "a", "b")
    assert in_one_snapshot(database_url, compare_runs, "a", "b") == first
    other = in_one_snapshot(
        database_url, compare_runs, "a", "b", CompareParams(resamples=500, seed=7)
    )
    assert other["params"]["resamples"] == 500 and other["params"]["seed"] == 7


def test_unknown_and_unsealed_runs_are_refused_clearly(database_url: str) -> None:
    seed_profile(database_url, "a", **BASE)
    with pytest.raises(UnknownRun):
        in_one_snapshot(database_url, compare_runs, "a", "nope")
    store(database_url, [attempt_row(run_id="fresh")])
    with pytest.raises(NotComparable, match="no sealed version yet"):
        in_one_snapshot(database_url, compare_runs, "a", "fresh")
