"""``tpmledger simulate``: flags, JSON summary, and a clean stop on Ctrl-C."""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys

import pytest

from tests.fixtures.servers import free_port, wait_for
from tests.simulator.otlp_recorder import recording_otlp_receiver
from tpmledger.cli.main import main
from tpmledger.cli.simulate_command import parse_duration


def test_parse_duration() -> None:
    assert parse_duration("30s") == 30.0
    assert parse_duration("5m") == 300.0
    assert parse_duration("1.5h") == 5400.0
    assert parse_duration("250ms") == 0.25
    assert parse_duration("42") == 42.0
    for bad in ("", "5 minutes", "-3s", "0s"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_duration(bad)


@pytest.mark.slow
def test_json_summary_matches_what_the_receiver_got(capsys: pytest.CaptureFixture[str]) -> None:
    with recording_otlp_receiver() as receiver:
        code = main(
            ["simulate", "--endpoint", receiver.url, "--run-id", "cli_run", "--shards", "2",
             "--concurrency", "2", "--duration", "2s", "--speed", "20", "--json",
             "--progress-every", "1s"]
        )  # fmt: skip
        received = list(receiver.spans)
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    (run,) = out["runs"]
    assert out["sweep_id"] is None
    assert run["run_id"] == "cli_run" and run["shards"] == 2 and run["concurrency"] == 2
    assert run["counters"]["spans_exported"] == len(received) > 0
    assert run["tokens_per_minute_total"] > 0
    assert {s.resource["tpmledger.shard.id"] for s in received} == {"0", "1"}


@pytest.mark.slow
def test_ctrl_c_stops_the_fleet_and_flushes_every_span() -> None:
    with recording_otlp_receiver() as receiver:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tpmledger.cli.main", "simulate", "--endpoint", receiver.url,
             "--shards", "2", "--concurrency", "4", "--duration", "5m", "--speed", "5",
             "--json"],
            stdout=subprocess.PIPE,
        )  # fmt: skip
        try:
            wait_for(lambda: len(receiver.spans) >= 4, timeout=60)
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        received = list(receiver.spans)
    assert proc.returncode == 130
    (run,) = json.loads(out)["runs"]
    assert run["interrupted"] is True and run["shards_reported"] == 2
    counters = run["counters"]
    assert counters["spans_ended"] == counters["spans_exported"] == len(received)
    cancelled = [s for s in received if s.attributes.get("error.type") == "cancelled"]
    assert cancelled and all(s.status_code == 2 for s in cancelled)  # STATUS_CODE_ERROR


def test_refuses_to_start_when_nothing_listens_at_the_endpoint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    assert main(["simulate", "--endpoint", endpoint, "--duration", "1s"]) == 2
    assert "start tpmledger first" in capsys.readouterr().err


def test_quota_flags_and_the_demos_runs() -> None:
    from tpmledger.cli.simulate_command import _plan, fleet_config
    from tpmledger.simulator.demo import (
        DEMO_KV_CACHE_TOKENS,
        DEMO_QUOTA_TPM,
        DEMO_RUN_S,
        demo_configs,
    )

    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    from tpmledger.cli import simulate_command

    simulate_command.register(subparsers)
    endpoint = ["--endpoint", "http://127.0.0.1:4318"]
    args = parser.parse_args(["simulate", "--quota-tpm", "90000", "--quota-rpm", "300", *endpoint])
    [(config, _)] = _plan(args)
    assert (config.server.quota_tpm, config.server.quota_rpm) == (90000, 300)
    with pytest.raises(SystemExit):
        parser.parse_args(["simulate", "--quota-tpm", "0"])
    demo = parser.parse_args(["simulate", "--demo", *endpoint])
    runs = demo_configs(fleet_config(demo, "demo"), "20261127_120000")
    assert [c.run_id for c in runs] == [
        "demo_20261127_120000_sweep_cap4", "demo_20261127_120000_sweep_cap8",
        "demo_20261127_120000_sweep_cap32", "demo_20261127_120000_serving",
    ]  # fmt: skip
    assert [c.server.quota_tpm for c in runs] == [DEMO_QUOTA_TPM] * 3 + [None]
    assert {c.sweep_id for c in runs[:3]} == {"demo_20261127_120000_sweep"}
    assert runs[3].sweep_id is None and runs[3].server.error_rate > 0.05
    # Longer than four minutes: every run covers ≥ 5 UTC minutes, so ≥ 3 inner ones.
    assert all(c.duration_s == DEMO_RUN_S > 240 for c in runs)
    assert all(c.otlp_endpoint == "http://127.0.0.1:4318" for c in runs)
    # The serving-bound run's KV cache is too small for its calls in flight; `up --demo`
    # names its server's port so its /metrics can be scraped (the others pick their own).
    assert [c.server.kv_cache_tokens for c in runs][3] == DEMO_KV_CACHE_TOKENS
    fixed = demo_configs(
        fleet_config(
            parser.parse_args(["simulate", "--demo", "--server-port", "18123", *endpoint]),
            "demo",
        ),
        "20261127_120000",
    )
    assert [c.server.port for c in fixed] == [0, 0, 0, 18123]
