"""The throughput-versus-stability figure: stacked shards, rates on y2, the peak marked."""

from __future__ import annotations

from typing import Any

from tpmledger.dashboard.data.minute_series import MinuteSeries
from tpmledger.dashboard.figures.throughput import throughput_figure

MINUTES = ["2026-02-01 03:44", "2026-02-01 03:45", "2026-02-01 03:46"]
METRICS = {
    "peak_minute": {
        "minute_utc": "2026-02-01T03:45:00Z",
        "tpm_total": 900,
        "prompt_tpm_in": 600,
        "completion_tpm_out": 300,
    },
    "peak_completion_minute": {
        "minute_utc": "2026-02-01T03:46:00Z",
        "tpm_total": 800,
        "prompt_tpm_in": 400,
        "completion_tpm_out": 400,
    },
}


def _shards(column: str) -> dict[str, MinuteSeries]:
    return {
        "0": MinuteSeries(MINUTES, {column: [100, 300, 200]}),
        "1": MinuteSeries(MINUTES, {column: [100, 600, 600]}),
    }


def _rates(retry: list[float | None]) -> MinuteSeries:
    return MinuteSeries(MINUTES, {"retry_rate": retry, "success_rate": [1.0, 0.9, 0.95]})


def _peak_text(figure: dict[str, Any]) -> str:
    return next(a["text"] for a in figure["layout"]["annotations"] if a.get("name") == "peak")


def test_stacks_one_bar_trace_per_shard_and_rates_on_second_axis() -> None:
    figure = throughput_figure(_shards("tpm_total"), _rates([0.0, 0.1, 0.0]), "total", METRICS)
    bars = [t for t in figure["data"] if t["type"] == "bar"]
    lines = [t for t in figure["data"] if t["type"] == "scatter"]
    assert [t["name"] for t in bars] == ["shard 0", "shard 1"]
    assert figure["layout"]["barmode"] == "stack"
    assert {t["name"] for t in lines} == {"retry rate", "success rate"}
    assert all(t["yaxis"] == "y2" for t in lines)
    assert "Total TPM" in figure["layout"]["yaxis"]["title"]["text"]
    peak_line = figure["layout"]["shapes"][0]
    assert peak_line["x0"] == peak_line["x1"] == "2026-02-01 03:45:30"  # middle of the minute
    assert _peak_text(figure) == "peak total minute 2026-02-01 03:45 UTC: 900 total TPM"


def test_completion_view_marks_the_completion_peak() -> None:
    figure = throughput_figure(
        _shards("completion_tpm_out"), _rates([0.0, 0.1, 0.0]), "completion", METRICS
    )
    assert figure["data"][0]["y"] == [100, 300, 200]
    assert _peak_text(figure) == "peak completion minute 2026-02-01 03:46 UTC: 400 completion TPM"


def test_unmeasured_retry_rate_is_said_not_drawn_as_zero() -> None:
    figure = throughput_figure(_shards("tpm_total"), _rates([None, None, None]), "total", METRICS)
    assert "retry rate" not in {t["name"] for t in figure["data"]}
    notes = [a["text"] for a in figure["layout"]["annotations"] if a.get("name") == "not-measured"]
    assert notes == ["retry rate: not measured"]
