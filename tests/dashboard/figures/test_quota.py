"""Used versus quota per target: one panel per target, its headroom in words."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.browser_helpers import overlapping_text
from tests.storage.builders import BASE_NS, MINUTE_NS
from tpmledger.dashboard.figures.quota import headroom_lines, quota_figure
from tpmledger.storage.readers.target_minutes import TargetMinute


def _minute(i: int, model: str = "m", **fields: Any) -> TargetMinute:
    values: dict[str, Any] = {
        "run_id": "r", "provider": "openai", "model": model, "minute_ns": BASE_NS + i * MINUTE_NS,
        "used_tpm": 900, "used_rpm": 9, "rate_limited": 0, "serving_failures": 0,
        "quota_tpm": None, "quota_rpm": None, "min_remaining_tokens": None,
        "min_remaining_requests": None, "values_ignored": 0,
    }  # fmt: skip
    return TargetMinute(**(values | fields))


def test_one_panel_per_target_normalized_to_its_quota() -> None:
    # A small quota beside a 40 M one: each target on its own panel, as a share of its quota.
    rows = [
        _minute(0, quota_tpm=1000),
        _minute(1, quota_tpm=1000, rate_limited=2),
        _minute(0, "big", used_tpm=4_000_000, quota_tpm=40_000_000),
        _minute(0, "n"),
    ]
    fig = quota_figure(rows)
    traces = {t["name"]: t for t in fig["data"]}
    assert set(traces) == {
        "openai/m tokens used", "openai/m rate limited (429)", "openai/big tokens used",
        "openai/n tokens used",
    }  # fmt: skip
    assert traces["openai/m tokens used"]["y"] == [0.9, 0.9]
    assert traces["openai/big tokens used"]["y"] == [0.1]
    assert traces["openai/n tokens used"]["y"] == [900]  # no quota: tokens used
    assert traces["openai/m tokens used"]["x"] == ["2026-02-01 03:44", "2026-02-01 03:45"]
    assert traces["openai/m rate limited (429)"]["x"] == ["2026-02-01 03:45"]
    axes = {t["name"]: t["yaxis"] for t in fig["data"]}
    assert len({axes["openai/m tokens used"], axes["openai/big tokens used"],
                axes["openai/n tokens used"]}) == 3  # fmt: skip
    layout = fig["layout"]
    assert layout["yaxis"]["tickformat"] == ".0%" and "tickformat" not in layout["yaxis3"]
    assert layout["xaxis"]["anchor"] == "y3"  # below the lowest panel
    quota_lines = [s for s in layout["shapes"] if s.get("name") == "quota"]
    assert [s["yref"] for s in quota_lines] == ["y", "y2"] and quota_lines[0]["y0"] == 1
    titles = [a["text"] for a in layout["annotations"] if a.get("name") == "target-title"]
    assert titles[0] == "<b>openai/m</b>: lowest headroom 10.0 % (tokens) at 03:44"
    assert "quota not measured" in titles[2]
    assert not [a for a in layout["annotations"] if a.get("name") == "not-measured"]


def test_headroom_in_words_names_the_lowest_minute() -> None:
    rows = [
        _minute(0, quota_tpm=1000, quota_rpm=100),
        _minute(1, used_tpm=996, used_rpm=50, quota_tpm=1000, quota_rpm=100, rate_limited=3),
        _minute(2, used_tpm=100, quota_tpm=1000, quota_rpm=100),
        _minute(0, "n"),
    ]
    lines = headroom_lines(rows)
    assert lines == [
        "openai/m: lowest headroom 0.4 % of its tokens quota, in minute 2026-02-01 03:45 UTC "
        "(996 of 1,000 tokens); 3 attempts rate limited (429).",
        "openai/n: quota not measured, so no headroom.",
    ]


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
    assert traces["openai/m tokens used"]["y"] == [0.9, None]
    assert traces["openai/m tokens used (in progress)"]["y"] == [None, 0.9]
    assert traces["openai/m tokens used (in progress)"]["marker"]["pattern"]["shape"] == "/"
    assert "in progress (open minute)" in traces
    assert any(a.get("name") == "in-progress" for a in fig["layout"]["annotations"])
    # Without open minutes nothing is drawn in progress.
    plain = quota_figure(rows)
    assert not [t for t in plain["data"] if "in progress" in t["name"]]


def _three_targets() -> list[TargetMinute]:
    rows = []
    for i in range(6):
        rows += [
            _minute(i, "gpt-4o", used_tpm=700_000 + 25_000 * i, used_rpm=300 + 40 * i,
                    quota_tpm=900_000, quota_rpm=650, rate_limited=3 if i == 4 else 0),
            _minute(i, "a-model-with-a-long-name", used_tpm=4_000_000, used_rpm=100,
                    quota_tpm=40_000_000, rate_limited=1 if i == 2 else 0),
            _minute(i, "no-quota", used_tpm=50_000),
        ]  # fmt: skip
    return rows


def test_the_legend_sits_below_the_time_axis_with_room_for_its_rows() -> None:
    # Above the panels, its wrapped rows ran into the figure's title and the first panel's
    # title (issue 37, seen in a real browser).
    fig = quota_figure(_three_targets(), {"2026-02-01 03:49"})
    layout = fig["layout"]
    entries = [t for t in fig["data"] if t.get("showlegend", True)]
    assert len(entries) == 7  # 3 + 2 + 1 target entries, and "in progress"
    legend = layout["legend"]
    assert legend["y"] < 0 and legend["yanchor"] == "top" and legend["traceorder"] == "normal"
    paper = layout["height"] - layout["margin"]["t"] - layout["margin"]["b"]
    below = -legend["y"] * paper  # px between the panels' bottom and the legend's top
    assert below >= 70  # the time axis' two lines of ticks and its title
    assert layout["margin"]["b"] >= below + 22 * 4  # four rows of two entries fit


def _young_run() -> list[TargetMinute]:
    # A run's first two minutes, both still open: the "in progress" label starts at the
    # first, under the panel's title (seen in the demo).
    target = {"provider": "tpmledger.simulator", "model": "sim-chat-1", "quota_tpm": 200_000}
    return [
        _minute(0, used_tpm=199_653, rate_limited=128, **target),
        _minute(1, used_tpm=96_000, **target),
    ]


@pytest.mark.browser
@pytest.mark.parametrize(
    ("width", "rows", "open_minutes"),
    [
        (560, _three_targets(), ["2026-02-01 03:49"]),
        (900, _three_targets(), ["2026-02-01 03:49"]),
        (1300, _three_targets(), ["2026-02-01 03:49"]),
        (900, _young_run(), ["2026-02-01 03:44", "2026-02-01 03:45"]),
        (1300, _young_run(), ["2026-02-01 03:44", "2026-02-01 03:45"]),
    ],
    ids=["3-targets-560px", "3-targets-900px", "3-targets-1300px", "young-900px", "young-1300px"],
)
def test_no_text_of_the_figure_overlaps_in_a_real_browser(
    browser: Any,
    tmp_path: Path,
    output_dir: Path,
    width: int,
    rows: list[TargetMinute],
    open_minutes: list[str],
) -> None:
    import plotly

    fig = quota_figure(rows, set(open_minutes))
    script = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    page = tmp_path / "quota.html"
    page.write_text(
        f'<html><head><script src="file://{script}"></script></head><body style="margin:0">'
        f'<div id="g" style="width:{width}px"></div><script>'
        f"Plotly.newPlot('g', {json.dumps(fig['data'])}, {json.dumps(fig['layout'])});"
        "</script></body></html>"
    )
    browser.get(f"file://{page}")
    from tests.fixtures.servers import wait_for

    wait_for(lambda: browser.execute_script("return !!document.querySelector('#g .legend')"))
    assert overlapping_text(browser, "g") == []
    name = f"quota-{len(rows)}-rows-{width}px.png"
    browser.find_element("id", "g").screenshot(str(output_dir / name))
