"""Concurrency, TTFT, shard balance and sweep figures, including their empty states."""

from __future__ import annotations

from typing import Any

from tpmledger.analytics.verdicts.cap_sweep import SweepPoint, SweepResult
from tpmledger.dashboard.data.minute_series import MinuteSeries
from tpmledger.dashboard.figures.concurrency import concurrency_figure, work_conserving_text
from tpmledger.dashboard.figures.shard_balance import shard_balance_figure
from tpmledger.dashboard.figures.sweep import sweep_figure
from tpmledger.dashboard.figures.ttft import ttft_figure

MINUTES = ["2026-02-01 03:44", "2026-02-01 03:45"]


def _texts(figure: dict[str, Any]) -> list[str]:
    return [a["text"] for a in figure["layout"]["annotations"]]


def _names(figure: dict[str, Any]) -> list[str]:
    return [t["name"] for t in figure["data"]]


def test_ttft_not_measured_says_so() -> None:
    empty = MinuteSeries(
        MINUTES,
        {"ttft_p50_s": [None, None], "ttft_p95_s": [None, None], "ttft_p99_s": [None, None]},
    )
    assert not ttft_figure(empty)["data"]
    assert _texts(ttft_figure(empty))[0].startswith("TTFT: not measured")
    some = MinuteSeries(
        MINUTES, {"ttft_p50_s": [0.1, None], "ttft_p95_s": [0.2, None], "ttft_p99_s": [0.3, None]}
    )
    assert _names(ttft_figure(some)) == ["TTFT p50", "TTFT p95", "TTFT p99"]


def test_concurrency_draws_cap_and_queue_depth() -> None:
    run = MinuteSeries(
        MINUTES,
        {
            "in_flight_mean": [10.0, 12.0],
            "in_flight_max": [14, 16],
            "concurrency_cap": [16, 16],
            "queue_depth_mean": [0.0, 2.0],
            "queue_depth_max": [0, 5],
        },
    )
    fig = concurrency_figure(run)
    names = _names(fig)
    # The cap is drawn first: the in-flight max (here 16 = the cap) is drawn over it.
    assert names == [
        "cap",
        "in-flight (mean)",
        "in-flight (max)",
        "queue depth (mean)",
        "queue depth (max)",
    ]
    cap, in_flight_max = fig["data"][0], fig["data"][2]
    assert cap["line"]["dash"] == "dash" and cap["opacity"] < 1
    assert in_flight_max["line"]["dash"] == "dot" and in_flight_max["line"]["width"] >= 2
    no_queue = MinuteSeries(MINUTES, {**run.columns, "queue_depth_mean": [None, None]})
    assert "queue depth: not measured" in _texts(concurrency_figure(no_queue))


def test_work_conserving_text_reports_the_verdict_or_not_measured() -> None:
    passing = {
        "work_conserving": {
            "sag_share": 0.03,
            "seconds_with_queue": 240,
            "passes": True,
            "threshold": 0.05,
        }
    }
    assert work_conserving_text(passing).startswith("Work-conserving check passes")
    assert "not measured" in work_conserving_text({"work_conserving": {"sag_share": None}})
    unsealed = {"work_conserving": {"sag_share": None}}
    waiting = work_conserving_text(unsealed, live_since_seal=True)
    assert "once it is sealed again" in waiting and "no queue wait" not in waiting


def test_shard_balance_bars_in_shard_order() -> None:
    figure = shard_balance_figure({"shares": {"10": 0.2, "2": 0.5, "0": 0.3}, "imbalance": 1.5})
    assert figure["data"][0]["x"] == ["shard 0", "shard 2", "shard 10"]
    assert "1.50" in figure["layout"]["title"]["text"]
    assert "not measured" in _texts(shard_balance_figure(None))[0]


def test_sweep_figure_marks_the_knee() -> None:
    view = SweepResult(
        "sw",
        [SweepPoint(4, "a", 1000, 0.0, 1.0, None), SweepPoint(8, "b", 2000, None, 0.99, None)],
        knee_cap=8,
    )
    figure = sweep_figure(view)
    assert figure["data"][0]["x"] == ["4", "8"]
    knee = [a["text"] for a in figure["layout"]["annotations"] if a.get("name") == "knee"]
    # The marker sits on the knee's category (index 1 of ["4", "8"]), not at x = 8.
    assert figure["layout"]["shapes"][0]["x0"] == 1
    assert knee == ["knee: recommended cap 8 (2,000 TPM)"]


def test_user_strings_are_shown_literally_not_as_html() -> None:
    from tpmledger.dashboard.figures.shard_balance import shard_balance_figure

    hostile = '<a href="https://example.invalid">x</a>'
    fig = shard_balance_figure({"shares": {hostile: 0.5, "1": 0.5}, "imbalance": 1.0})
    labels = [x for trace in fig["data"] for x in trace.get("x", [])]
    assert all("<a" not in str(x) for x in labels)
    assert any("&lt;a href=" in str(x) for x in labels)


def test_a_one_minute_run_gets_a_minute_axis_and_visible_points() -> None:
    from tpmledger.dashboard.data.minute_series import MinuteSeries
    from tpmledger.dashboard.figures.ttft import ttft_figure

    run = MinuteSeries(
        minutes=["2026-02-01 06:50"],
        columns={"ttft_p50_s": [0.2], "ttft_p95_s": [0.3], "ttft_p99_s": [0.4]},
    )
    fig = ttft_figure(run)
    axis = fig["layout"]["xaxis"]
    # Not Plotly's automatic range of a single x (milliseconds around 06:50:30).
    assert axis["range"] == ["2026-02-01 06:49", "2026-02-01 06:52"]
    assert axis["dtick"] == 60_000 and axis["tickformat"] == "%H:%M"
    assert {t["mode"] for t in fig["data"]} == {"lines+markers"}
