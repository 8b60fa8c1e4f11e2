"""The serving side beside the client: the figure's panels and its honest empty state."""

from __future__ import annotations

from typing import Any

from tests.storage.builders import BASE_NS, MINUTE_NS
from tpmledger.dashboard.data.minute_series import MinuteSeries
from tpmledger.dashboard.figures.serving import serving_figure
from tpmledger.storage.readers.server_minutes_read import ServerMinute


def _server(i: int, **fields: Any) -> ServerMinute:
    values: dict[str, Any] = {
        "instance": "gpu-1:8000", "engine": "vllm", "model": "m",
        "minute_ns": BASE_NS + i * MINUTE_NS, "running_mean": 8.0, "running_max": 8.0,
        "waiting_mean": 3.0, "waiting_max": 5.0, "kv_cache_mean": 0.95, "kv_cache_max": 0.99,
        "gen_throughput_mean": None, "preemptions": 1.0, "prompt_tokens": 600.0,
        "generation_tokens": 400.0, "queue_time_mean_s": None, "ttft_mean_s": None,
    }  # fmt: skip
    return ServerMinute(**(values | fields))


CLIENT = MinuteSeries(
    minutes=["2026-02-01 03:44", "2026-02-01 03:45"],
    columns={"in_flight_mean": [6.0, 6.5], "tpm_total": [1000, 1100]},
)


def test_client_and_server_share_one_time_axis_in_three_panels() -> None:
    fig = serving_figure(
        CLIENT, [_server(0), _server(1, prompt_tokens=None, generation_tokens=None)]
    )
    traces = {t["name"]: t for t in fig["data"]}
    assert set(traces) == {
        "client in-flight (mean)", "client TPM", "vllm gpu-1:8000 (m) running",
        "vllm gpu-1:8000 (m) waiting", "vllm gpu-1:8000 (m) KV cache (mean)",
        "vllm gpu-1:8000 (m) KV cache (max)", "vllm gpu-1:8000 (m) tokens counted",
    }  # fmt: skip
    assert traces["vllm gpu-1:8000 (m) waiting"]["x"] == CLIENT.minutes
    assert traces["vllm gpu-1:8000 (m) KV cache (mean)"]["yaxis"] == "y2"
    assert traces["client TPM"]["yaxis"] == traces["vllm gpu-1:8000 (m) tokens counted"]["yaxis"]
    # A minute whose tokens the server did not count is a gap, not 0.
    assert traces["vllm gpu-1:8000 (m) tokens counted"]["y"] == [1000.0, None]
    assert fig["layout"]["shapes"][0]["y0"] == 0.9  # where the verdict counts the cache full


def test_no_server_metrics_say_not_measured_and_open_minutes_are_in_progress() -> None:
    empty = serving_figure(CLIENT, [])
    assert empty["data"] == []
    assert "Serving side: not measured" in empty["layout"]["annotations"][0]["text"]
    live = serving_figure(CLIENT, [_server(0), _server(1)], {"2026-02-01 03:45"})
    assert any(a.get("name") == "in-progress" for a in live["layout"]["annotations"])


def test_the_sweep_table_says_each_caps_server_saturation() -> None:
    from tpmledger.dashboard.pages.sweep import server_saturation_text

    server = {"minutes": 4, "saturated": 3, "idle": 0, "queue": 4}
    assert server_saturation_text({"evidence": {"server": server}}) == (
        "saturated 3 of 4 min · idle 0"
    )
    assert server_saturation_text({"evidence": {}}) == "not measured"
    assert server_saturation_text(None) == "not measured"


def test_the_legend_sits_below_the_panels_and_each_axis_title_fits_its_panel() -> None:
    # Above the panels, the wrapped legend of a run with two servers ran over the title and the
    # top panel, and the long axis titles ran into each other (seen in a real browser).
    servers = [_server(0), _server(0, instance="gpu-2:8000")]
    fig = serving_figure(CLIENT, servers)
    layout = fig["layout"]
    rows = -(-(len(fig["data"]) + 1) // 3)
    assert layout["legend"]["y"] < 0 and layout["legend"]["yanchor"] == "top"
    assert layout["margin"]["b"] >= 80 + 22 * rows
    plot_height = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
    for axis in ("yaxis", "yaxis2", "yaxis3"):
        low, high = layout[axis]["domain"]
        title = layout[axis]["title"]["text"]
        assert len(title) * 7 <= (high - low) * plot_height, (axis, title)
