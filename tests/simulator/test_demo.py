"""The demo shows every verdict (issue 37): its four runs, side by side, exported to a real
ingest, sealed, then judged by the bottleneck verdict and by Compare.

The simulator has no time compression (spans carry wall-clock times, and the provider quota
counts real UTC minutes), so this runs the demo's scenario at its own length, about five
and a half minutes: marked slow (the full lane runs it, ``--fast`` leaves it out).
"""

from __future__ import annotations

import socket

import pytest

from tests.fixtures.servers import RunningIngest
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.analytics.verdicts.cap_sweep import SweepThresholds, load_sweep
from tpmledger.analytics.verdicts.compare_runs import compare_runs
from tpmledger.ingest.server_scraper import ServerScraper
from tpmledger.simulator.demo import demo_configs
from tpmledger.simulator.fleet import FleetConfig, run_fleets
from tpmledger.storage.server.database import in_one_snapshot

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_demo_shows_every_verdict(running_ingest: RunningIngest) -> None:
    # As `up --demo` runs it: the serving run's simulated server listens on a port whose vLLM
    # metrics ingest scrapes, and those metrics join the runs that ask for their model.
    port = _free_port()
    base = FleetConfig(run_id="demo", otlp_endpoint=running_ingest.http_url)
    base = base.model_copy(update={"server": base.server.model_copy(update={"port": port})})
    configs = demo_configs(base, "t")
    scraper = ServerScraper(
        running_ingest.database_url, [f"http://127.0.0.1:{port}/metrics"], interval_s=15.0
    )
    scraper.start()
    try:
        results = run_fleets(configs)
    finally:
        scraper.stop()
    assert scraper.states[f"http://127.0.0.1:{port}/metrics"].readings_total > 0
    assert all(len(r.complete) == r.config.shards for r in results)
    url = running_ingest.database_url
    verdicts, evidence = {}, {}
    for config in configs:
        sealed = seal_run(url, config.run_id)
        evidence[config.run_id] = sealed.metrics["bottleneck"]["evidence"]
        assert evidence[config.run_id]["inner_minutes"] >= 3, config.run_id
        verdicts[config.run_id] = sealed.metrics["bottleneck"]["verdict"]
    # The scraped server is the serving run's, joined to it alone.
    assert evidence["demo_t_serving"]["server"]["instances"] == 1
    assert all("server" not in evidence[f"demo_t_sweep_cap{cap}"] for cap in (4, 8, 32))
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
