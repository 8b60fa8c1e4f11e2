"""Each simulator pitfall produces the diagnostic that names it, through a real ingest
server, the database and a seal; and the ``--pitfall`` flags set what they say."""

from __future__ import annotations

import argparse

import pytest

from tests.fixtures.servers import start_ingest
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.analytics.views.run_extras import run_extras
from tpmledger.cli.main import build_parser
from tpmledger.cli.simulate_command import fleet_config
from tpmledger.simulator.config import ServerConfig
from tpmledger.simulator.fleet import FleetConfig, run_fleet
from tpmledger.storage.server.database import in_one_snapshot

RUN_ID = "sim_pitfalls"


@pytest.mark.slow
def test_every_pitfall_shows_in_the_sealed_diagnostics(database_url: str) -> None:
    ingest = start_ingest(database_url)
    try:
        config = FleetConfig(
            run_id=RUN_ID,
            shards=2,
            concurrency=4,
            duration_s=4.0,
            otlp_endpoint=ingest.http_url,
            retry_backoff_s=0.0,  # retry storm: no budget, no backoff
            max_attempts=10,
            request_timeout_s=5.0,
            server=ServerConfig(speed=20.0, error_rate=0.35, timeout_rate=0.0),
            deadline_s=0.01,  # every call outlasts it
            tool_wait_s=0.2,
            target_cap=2,  # 8 in flight against a pool of 2
        )
        result = run_fleet(config)
        assert result.total.spans_ended == result.total.spans_exported > 0
    finally:
        ingest.stop()
    seal = seal_run(database_url, RUN_ID)
    diagnostics = in_one_snapshot(database_url, run_extras, RUN_ID, seal.version)["diagnostics"]
    assert diagnostics["retry_storm"]["flag"] is True
    assert diagnostics["deadline_overrun"]["share"] > 0.9
    assert diagnostics["slot_held_by_tool"]["share"] > 0
    [target] = diagnostics["target_saturation"]
    assert target["cap"] == 2 and target["share_over_cap"] > 0


def test_the_pitfall_flags_set_the_fleet_and_server() -> None:
    argv = ["simulate", "--endpoint", "http://127.0.0.1:1", "--concurrency", "16"]
    for name in ("retry-storm", "deadline-overrun", "tool-wait", "shared-pool"):
        argv += ["--pitfall", name]
    args: argparse.Namespace = build_parser().parse_args(argv)
    config = fleet_config(args, "r")
    assert config.server.error_rate == 0.35
    assert (config.retry_backoff_s, config.max_attempts) == (0.0, 10)
    assert (config.deadline_s, config.tool_wait_s, config.target_cap) == (2.0, 1.0, 16)
    plain = fleet_config(build_parser().parse_args(argv[:5]), "r")
    assert (plain.deadline_s, plain.tool_wait_s, plain.target_cap) == (None, 0.0, None)
