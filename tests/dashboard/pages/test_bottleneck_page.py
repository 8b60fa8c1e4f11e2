"""The run page says what bounds throughput, with used versus quota per target, in a real
Chromium; the sweep page names each cap's bottleneck (docs/metrics.md#bottleneck)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from tests.analytics.bottleneck_runs import RUNS, RunSpec, base_minute_ns, minute_text, record_run
from tests.analytics.seeding import store
from tests.dashboard.browser_helpers import (
    annotation,
    overlapping_text,
    screenshot,
    text_of,
    wait_graph,
    wait_text,
)
from tests.dashboard.conftest import RunningDashboard
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.dashboard.pages.sweep import sweep_panels
from tpmledger.ingest.normalize import normalize_request

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _store_run(url: str, spec: RunSpec, base: int) -> None:
    """The run's spans encoded as the OTLP exporter encodes them, normalized as ingest does."""
    batch = normalize_request(encode_spans(record_run(spec, base)))
    assert batch.rejected == 0
    store(url, batch.rows)


def test_run_page_names_the_bottleneck_and_draws_used_versus_quota(
    page_database_url: str, dashboard_server: RunningDashboard, browser: Any, output_dir: Path
) -> None:
    base = base_minute_ns()
    _store_run(page_database_url, RUNS["quota-bound"], base)
    seal_run(page_database_url, "quota-bound")

    browser.get(f"{dashboard_server.url}/runs/quota-bound")
    text = wait_text(browser, "run-bottleneck")
    assert "Throughput is bounded by the provider's quota." in text
    assert "6.25 % of attempts were rate limited (12 of 192)" in text
    inner = ", ".join(minute_text(base, m)[11:16] for m in range(1, 5))
    assert f"Evidence minutes: {inner} UTC." in text
    assert "quota_headroom_max 0.1" in text  # the thresholds are printed with the verdict
    # The verdict's 192 attempts beside the header's 288, in words.
    assert "The verdict counts the 192 of the run's 288 attempts that ended in its 4 inner" in text
    figure = wait_graph(browser, "run-quota")
    names = {t["name"] for t in figure["traces"]}
    assert {
        "openai/gpt-test tokens used",
        "openai/gpt-test requests used",
        "openai/gpt-test rate limited (429)",
    } == names
    # One panel per target, as a share of its quota (the quota is the 100 % line).
    assert annotation(figure, "not-measured") is None
    assert annotation(figure, "target-title").startswith("<b>openai/gpt-test</b>: lowest headroom")
    headroom = text_of(browser, "run-quota-headroom")
    assert headroom.startswith("openai/gpt-test: lowest headroom ")
    assert "of 7,200 tokens" in headroom or "requests)" in headroom
    # Its title, legend, panel titles and axis titles are each readable (issue 37: the
    # legend ran into the title).
    assert overlapping_text(browser, "run-quota") == []
    screenshot(browser, output_dir, "quota-bound-run")

    # A live run (never sealed): the verdict over the minutes so far, said to be live.
    _store_run(page_database_url, RUNS["cap-bound"], base)
    LiveUpdater(page_database_url).update_once()
    browser.get(f"{dashboard_server.url}/runs/cap-bound")
    text = wait_text(browser, "run-bottleneck")
    assert "bounded by the concurrency cap (live: over the minutes so far)" in text
    screenshot(browser, output_dir, "cap-bound-live-run")

    # No cap declared, no quota reported: both said, not guessed.
    _store_run(page_database_url, RUNS["no-cap"], base)
    seal_run(page_database_url, "no-cap")
    browser.get(f"{dashboard_server.url}/runs/no-cap")
    assert "no concurrency cap declared" in wait_text(browser, "run-bottleneck")
    figure = wait_graph(browser, "run-quota")
    assert "quota: not measured" in (annotation(figure, "not-measured") or "")
    assert "run-bottleneck" in browser.page_source and text_of(browser, "run-bottleneck")


def test_sweep_page_names_each_caps_bottleneck(page_database_url: str) -> None:
    base = base_minute_ns()
    for cap, lanes in ((8, 8), (24, 8)):
        spec = RunSpec(
            f"sweep-cap-{cap}", lanes=lanes, cap=cap, resource={"tpmledger.sweep.id": "sw"}
        )
        _store_run(page_database_url, spec, base)
        seal_run(page_database_url, spec.run_id)
    from tpmledger.dashboard.config import DashboardConfig

    config = DashboardConfig(database_url=page_database_url)
    _, _, table = sweep_panels(config, "sw")
    cells = [str(row) for row in table.children[1].children]
    assert "the concurrency cap" in cells[0] and "demand" in cells[1]
