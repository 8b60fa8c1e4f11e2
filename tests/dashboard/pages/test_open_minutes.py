"""Open minutes drawn as in progress, in a real headless Chromium
(docs/dashboard.md#in-progress-minutes).

A live run whose newest minutes are still open (within ``close_after_s`` of their end):
the live updater fills the live minute table from attempts stored through the real write
path; the run page must draw those minutes hatched and translucent with an "in progress"
legend entry and a labelled band, and name a closed minute as the peak even though the
open minute holds more tokens so far.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.analytics.seeding import store
from tests.dashboard.browser_helpers import PAGE_WAIT_S, screenshot, text_of, wait_graph, wait_text
from tests.dashboard.conftest import RunningDashboard
from tests.storage.builders import attempt_row
from tpmledger.analytics.live.live_updater import LiveUpdater

pytestmark = pytest.mark.browser
RUN_ID = "open-minutes"
SECOND = 1_000_000_000
MINUTE = 60 * SECOND

# What Plotly drew, with the styling the in-progress parts carry.
_STYLE_JS = """
const gd = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');
if (!gd || !gd.data || !gd._fullLayout) { return null; }
return {
  traces: gd.data.map(t => ({name: t.name || null, type: t.type,
      legendgroup: t.legendgroup || null, showlegend: t.showlegend !== false,
      pattern: t.marker && t.marker.pattern ? t.marker.pattern.shape : null,
      dash: t.line ? t.line.dash || null : null,
      x: Array.from(t.x || []), y: Array.from(t.y || [])})),
  shapes: (gd.layout.shapes || []).map(s => ({type: s.type, x0: s.x0, x1: s.x1})),
  annotations: (gd.layout.annotations || []).map(a => ({name: a.name || null, text: a.text})),
  legend: Array.from(document.querySelectorAll('#' + arguments[0] + ' .legendtext'))
      .map(e => e.textContent),
};
"""


def _seed(url: str) -> list[str]:
    """Eight minutes of two shards; the current minute (open) is the busiest so far.
    Returns the plotted minutes (``YYYY-MM-DD HH:MM``)."""
    now_minute = time.time_ns() // MINUTE * MINUTE
    rows = []
    minutes = []
    for back in range(7, -1, -1):
        minute = now_minute - back * MINUTE
        minutes.append(time.strftime("%Y-%m-%d %H:%M", time.gmtime(minute // SECOND)))
        per_shard = 60 if back == 0 else 30 + 2 * back
        for shard in ("0", "1"):
            for i in range(per_shard):
                end = minute + (i * 59 * SECOND) // per_shard + SECOND
                rows.append(
                    attempt_row(
                        run_id=RUN_ID,
                        shard_id=shard,
                        declared_shard_count=2,
                        concurrency_cap=8,
                        start_ns=end - 2 * SECOND,
                        end_ns=end,
                        ttft_s=0.2 + (i % 10) * 0.01,
                        prompt_tokens=300,
                        completion_tokens=120,
                    )
                )
    store(url, rows)
    LiveUpdater(url).update_once()
    return minutes


def _styled(browser: Any, graph_id: str) -> dict[str, Any]:
    def ready(_figure: dict[str, Any]) -> bool:
        styled = browser.execute_script(_STYLE_JS, graph_id)
        return bool(styled and styled["traces"])

    wait_graph(browser, graph_id, ready)
    result: dict[str, Any] = browser.execute_script(_STYLE_JS, graph_id)
    return result


def test_open_minutes_are_drawn_in_progress_and_never_peak(
    page_database_url: str, dashboard_server: RunningDashboard, browser: Any, output_dir: Path
) -> None:
    minutes = _seed(page_database_url)
    browser.get(f"{dashboard_server.url}/runs/{RUN_ID}")
    assert wait_text(browser, "run-status", timeout=PAGE_WAIT_S) == "live — provisional"

    throughput = _styled(browser, "run-throughput-graph")
    open_bars = [
        t for t in throughput["traces"] if t["type"] == "bar" and t["legendgroup"] == "in-progress"
    ]
    # One hatched part per shard plus the legend entry.
    assert {t["name"] for t in open_bars} >= {"shard 0 (in progress)", "shard 1 (in progress)"}
    assert all(t["pattern"] == "/" for t in open_bars)
    assert "in progress (open minute)" in throughput["legend"]
    assert any(a["name"] == "in-progress" for a in throughput["annotations"])
    assert any(s["type"] == "rect" for s in throughput["shapes"])
    shard0 = next(t for t in open_bars if t["name"] == "shard 0 (in progress)")
    drawn_open = [x[:16] for x, y in zip(shard0["x"], shard0["y"], strict=True) if y is not None]
    assert minutes[-1] in drawn_open  # the current minute is in progress
    solid = next(t for t in throughput["traces"] if t["name"] == "shard 0")
    drawn_solid = [x[:16] for x, y in zip(solid["x"], solid["y"], strict=True) if y is not None]
    assert minutes[0] in drawn_solid and not set(drawn_solid) & set(drawn_open)

    # The open current minute holds the most tokens so far, yet the peak is a closed one.
    peak = text_of(browser, "run-kpi-peak-total-detail")
    assert minutes[-1][11:] not in peak.split(" · ")[0]
    assert text_of(browser, "run-kpi-peak-total-value") == f"{2 * (30 + 2 * 7) * 420:,}"
    assert "in progress, not counted" in text_of(browser, "run-kpi-sustained-detail")
    # Live TTFT is sketched and says so.
    assert "within ±1 %" in text_of(browser, "run-kpi-ttft-detail")

    for graph_id in ("run-concurrency-graph", "run-ttft-graph"):
        styled = _styled(browser, graph_id)
        assert any(t["legendgroup"] == "in-progress" and t["dash"] == "dot"
                   for t in styled["traces"]), graph_id  # fmt: skip
        assert "in progress (open minute)" in styled["legend"], graph_id
    browser.execute_script(
        "document.getElementById('run-throughput-graph').scrollIntoView({block: 'start'});"
    )
    screenshot(browser, output_dir, "run-open-minutes")
