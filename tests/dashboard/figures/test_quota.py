"""Used versus quota per target: the figure's traces and its honest notes."""

from __future__ import annotations

from typing import Any

from tests.storage.builders import BASE_NS, MINUTE_NS
from tpmledger.dashboard.figures.quota import quota_figure
from tpmledger.storage.target_minutes import TargetMinute


def _minute(i: int, model: str = "m", **fields: Any) -> TargetMinute:
    values: dict[str, Any] = {
        "run_id": "r", "provider": "openai", "model": model, "minute_ns": BASE_NS + i * MINUTE_NS,
        "used_tpm": 900, "used_rpm": 9, "rate_limited": 0, "serving_failures": 0,
        "quota_tpm": None, "quota_rpm": None, "min_remaining_tokens": None,
        "min_remaining_requests": None, "values_ignored": 0,
    }  # fmt: skip
    return TargetMinute(**(values | fields))


def test_used_bars_quota_lines_and_rate_limited_markers_per_target() -> None:
    fig = quota_figure(
        [_minute(0, quota_tpm=1000), _minute(1, quota_tpm=1000, rate_limited=2), _minute(0, "n")]
    )
    traces = {t["name"]: t for t in fig["data"]}
    assert set(traces) == {
        "openai/m tokens used", "openai/m tokens quota", "openai/m requests used",
        "openai/m rate limited (429)", "openai/n tokens used", "openai/n requests used",
    }  # fmt: skip
    assert traces["openai/m tokens quota"]["y"] == [1000, 1000]
    assert traces["openai/m tokens used"]["x"] == ["2026-02-01 03:44", "2026-02-01 03:45"]
    assert traces["openai/m rate limited (429)"]["x"] == ["2026-02-01 03:45"]
    assert traces["openai/m requests used"]["yaxis"] == "y2"
    assert fig["layout"]["xaxis"]["anchor"] == "y2"
    assert not [a for a in fig["layout"]["annotations"] if a.get("name") == "not-measured"]


def test_no_quota_reported_says_so_and_no_attempts_says_not_measured() -> None:
    fig = quota_figure([_minute(0)])
    notes = [a["text"] for a in fig["layout"]["annotations"] if a.get("name") == "not-measured"]
    assert notes and notes[0].startswith("quota: not measured")
    empty = quota_figure([])
    assert empty["data"] == [] and "not measured" in empty["layout"]["annotations"][0]["text"]


def test_open_minutes_are_drawn_in_progress() -> None:
    rows = [_minute(0, quota_tpm=1000), _minute(1, quota_tpm=1000)]
    fig = quota_figure(rows, {"2026-02-01 03:45"})
    traces = {t["name"]: t for t in fig["data"]}
    # The settled part keeps the closed minute; the in-progress part, hatched, the open one.
    assert traces["openai/m tokens used"]["y"] == [900, None]
    assert traces["openai/m tokens used (in progress)"]["y"] == [None, 900]
    assert traces["openai/m tokens used (in progress)"]["marker"]["pattern"]["shape"] == "/"
    assert "in progress (open minute)" in traces
    assert any(a.get("name") == "in-progress" for a in fig["layout"]["annotations"])
    # Without open minutes nothing is drawn in progress.
    plain = quota_figure(rows)
    assert not [t for t in plain["data"] if "in progress" in t["name"]]
