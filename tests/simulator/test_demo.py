"""The demo shows every verdict (issue 37): its four runs, side by side, exported to a real
ingest, sealed, then judged by the bottleneck verdict and by Compare.

The simulator has no time compression (spans carry wall-clock times, and the provider quota
counts real UTC minutes), so this runs the demo's scenario at its own length, about five
and a half minutes: marked slow (the full lane runs it, ``--fast`` leaves it out).
"""

from __future__ import annotations

import pytest

from tests.fixtures.servers import RunningIngest
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.analytics.verdicts.cap_sweep import SweepThresholds, load_sweep
from tpmledger.analytics.verdicts.compare_runs import compare_runs
from tpmledger.simulator.demo import demo_configs
from tpmledger.simulator.fleet import FleetConfig, run_fleets
from tpmledger.storage.server.database import in_one_snapshot

pytestmark = pytest.mark.slow


def test_the_demo_shows_every_verdict(running_ingest: RunningIngest) -> None:
    base = FleetConfig(run_id="demo", otlp_endpoint=running_ingest.http_url)
    configs = demo_configs(base, "t")
    results = run_fleets(configs)
    assert all(len(r.complete) == r.config.shards for r in results)
    url = running_ingest.database_url
    verdicts = {}
    for config in configs:
        sealed = seal_run(url, config.run_id)
        assert sealed.metrics["bottleneck"]["evidence"]["inner_minutes"] >= 3, config.run_id
        verdicts[config.run_id] = sealed.metrics["bottleneck"]["verdict"]
    assert verdicts == {
        "demo_t_sweep_cap4": "concurrency_cap",
        "demo_t_sweep_cap8": "concurrency_cap",
        "demo_t_sweep_cap32": "provider_quota",
        "demo_t_serving": "serving",
    }
    improved = in_one_snapshot(url, compare_runs, "demo_t_sweep_cap4", "demo_t_sweep_cap8")
    assert improved["verdict"] == "improved", improved["rule"]
    moved = in_one_snapshot(url, compare_runs, "demo_t_sweep_cap8", "demo_t_sweep_cap32")
    assert moved["verdict"] == "moved_the_bottleneck", moved["rule"]
    assert moved["bottlenecks"]["a"]["verdict"] == "concurrency_cap"
    assert moved["bottlenecks"]["b"]["verdict"] == "provider_quota"
    sweep = in_one_snapshot(url, load_sweep, "demo_t_sweep", SweepThresholds())
    assert sweep.knee_cap == 8 and not sweep.provisional
