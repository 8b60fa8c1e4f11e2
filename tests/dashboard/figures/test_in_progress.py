"""Open minutes drawn in progress on every minute chart (docs/dashboard.md#in-progress-minutes)."""

from __future__ import annotations

import numpy as np

from tpmledger.analytics.verdicts.compare_runs import RunMinutes
from tpmledger.dashboard.data.minute_series import MinuteSeries
from tpmledger.dashboard.figures.chart_style import IN_PROGRESS, IN_PROGRESS_GROUP
from tpmledger.dashboard.figures.compare import compare_figure
from tpmledger.dashboard.figures.concurrency import concurrency_figure
from tpmledger.dashboard.figures.throughput import throughput_figure
from tpmledger.dashboard.figures.ttft import ttft_figure

MINUTES = ["2026-11-24 15:00", "2026-11-24 15:01", "2026-11-24 15:02", "2026-11-24 15:03"]
STATES = ["sealed", "closed", "open", "open"]


def _series(**columns: list[object]) -> MinuteSeries:
    return MinuteSeries(minutes=list(MINUTES), columns=columns, states=list(STATES))


def _parts(figure: dict[str, object]) -> list[dict[str, object]]:
    return [t for t in figure["data"] if t.get("legendgroup") == IN_PROGRESS_GROUP]  # type: ignore[union-attr, attr-defined]


def test_throughput_bars_of_open_minutes_are_hatched_and_never_a_settled_bar() -> None:
    shard = _series(tpm_total=[900, 1000, 950, 80])
    run = _series(retry_rate=[0.0, 0.1, 0.0, 0.0], success_rate=[1.0, 0.9, 1.0, 1.0])
    fig = throughput_figure({"0": shard}, run, "total", {})
    settled = next(t for t in fig["data"] if t["name"] == "shard 0")
    assert settled["y"] == [900, 1000, None, None]
    hatched = next(t for t in fig["data"] if t["name"] == "shard 0 (in progress)")
    assert hatched["y"] == [None, None, 950, 80]
    assert hatched["marker"]["pattern"]["shape"] == "/" and hatched["marker"]["opacity"] < 1
    legend = [t for t in _parts(fig) if t.get("showlegend")]
    assert [t["name"] for t in legend] == [IN_PROGRESS]
    band = [s for s in fig["layout"]["shapes"] if s["type"] == "rect"]
    assert band and band[0]["x0"] == MINUTES[2] and band[0]["x1"] == "2026-11-24 15:04"
    rate = next(t for t in fig["data"] if t["name"] == "success rate (in progress)")
    assert rate["y"] == [None, 0.9, 1.0, 1.0] and rate["line"]["dash"] == "dot"


def test_line_charts_continue_dotted_into_open_minutes() -> None:
    ttft = ttft_figure(_series(ttft_p50_s=[0.2] * 4, ttft_p95_s=[0.3] * 4, ttft_p99_s=[0.4] * 4))
    flight = concurrency_figure(
        _series(in_flight_mean=[3.0] * 4, in_flight_max=[4] * 4, concurrency_cap=[8] * 4)
    )
    for fig in (ttft, flight):
        dotted = [t for t in _parts(fig) if t["type"] == "scatter"]
        assert dotted and all(t["line"]["dash"] == "dot" for t in dotted)
        assert any(a.get("name") == "in-progress" for a in fig["layout"]["annotations"])


def test_sealed_series_are_drawn_as_before() -> None:
    sealed = MinuteSeries(minutes=list(MINUTES), columns={"ttft_p50_s": [0.2] * 4})
    assert _parts(ttft_figure(sealed)) == []


def test_compare_marks_minutes_open_when_the_version_was_sealed() -> None:
    def run(run_id: str, open_at_seal: list[bool]) -> RunMinutes:
        columns = {
            "tpm_total": np.array([5.0, 6.0, 7.0, 1.0]),
            "calls_in_minute": np.array([10.0, 10.0, 10.0, 2.0]),
            "retries": None,
            "stalls": None,
        }
        return RunMinutes(run_id, 1, "seal", list(MINUTES), columns, open_at_seal=open_at_seal)

    fig = compare_figure(run("a", []), run("b", [False, False, True, True]))
    parts = _parts(fig)
    assert [t["name"] for t in parts if t.get("showlegend")] == [IN_PROGRESS]
    line = next(t for t in parts if t["name"] == "B b: TPM (total) (in progress)")
    assert line["y"] == [None, 6.0, 7.0, 1.0]
