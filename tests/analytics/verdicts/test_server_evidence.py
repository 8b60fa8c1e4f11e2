"""The serving side's evidence in the bottleneck rules, over hand-built rows
(docs/metrics.md#bottleneck)."""

from __future__ import annotations

from typing import Any

from tests.analytics.verdicts.test_bottleneck import _minutes, _target
from tpmledger.analytics.verdicts.bottleneck import bottleneck_verdict
from tpmledger.storage.readers.server_minutes_read import ServerMinute

MINUTE_NS = 60_000_000_000


def _server(minute: int, **fields: Any) -> ServerMinute:
    values: dict[str, Any] = {
        "instance": "gpu-1:8000",
        "engine": "vllm",
        "model": "m",
        "minute_ns": minute * MINUTE_NS,
        "running_mean": 8.0,
        "running_max": 8.0,
        "waiting_mean": 0.0,
        "waiting_max": 0.0,
        "kv_cache_mean": 0.4,
        "kv_cache_max": 0.5,
        "gen_throughput_mean": None,
        "preemptions": 0.0,
        "prompt_tokens": 600.0,
        "generation_tokens": 400.0,
        "queue_time_mean_s": None,
        "ttft_mean_s": None,
    }
    return ServerMinute(**(values | fields))


def test_a_kv_cache_bound_server_is_serving_without_client_failures() -> None:
    targets = [_target(m) for m in range(6)]  # no 429s, no failures; cap not full
    full = [_server(m, waiting_mean=5.0, waiting_max=9.0, kv_cache_mean=0.97) for m in range(6)]
    result = bottleneck_verdict(_minutes(6, 4, 8), targets, servers=full)
    assert result["verdict"] == "serving"
    assert result["evidence"]["serving_signals"] == ["queue", "kv_cache"]
    assert "KV cache ≥ 90 % full" in result["reason"]
    assert len(result["minutes"]) == 4  # the inner minutes
    server = result["evidence"]["server"]
    assert (server["queue"], server["kv_cache"], server["preemption"]) == (4, 4, 0)
    # 1000 tokens counted by the server and by the spans in each inner minute: no gap.
    assert server["tokens"] == {"client": 4000, "server": 4000.0, "gap": 0.0, "gap_share": 0.0}
    assert result["params"]["server_kv_cache_min"] == 0.9
    # Without the servers' rows the same run is demand-bound, and its verdict reads as
    # before the server rules existed (no server thresholds): older seals still verify.
    plain = bottleneck_verdict(_minutes(6, 4, 8), targets)
    assert plain["verdict"] == "demand"
    assert not [k for k in plain["params"] if k.startswith("server_")]


def test_preemptions_with_a_queue_are_serving_and_a_queue_alone_is_not() -> None:
    targets = [_target(m) for m in range(6)]
    preempting = [_server(m, waiting_mean=2.0, waiting_max=3.0, preemptions=7.0) for m in range(6)]
    result = bottleneck_verdict(_minutes(6, 8, 8), targets, servers=preempting)
    assert result["verdict"] == "serving"
    assert result["evidence"]["serving_signals"] == ["queue", "preemption"]
    queued = [_server(m, waiting_mean=2.0, waiting_max=3.0) for m in range(6)]
    assert bottleneck_verdict(_minutes(6, 8, 8), targets, servers=queued)["verdict"] == (
        "concurrency_cap"
    )
    # Saturated in 1 of 4 inner minutes is not "most".
    one = [_server(1, waiting_mean=2.0, kv_cache_mean=0.95)]
    assert bottleneck_verdict(_minutes(6, 4, 8), targets, servers=one)["verdict"] == "demand"


def test_a_quota_bound_run_stays_provider_quota_with_an_empty_server_queue() -> None:
    tight = [_target(m, rate_limited=5, quota_tpm=1000, used_tpm=990) for m in range(6)]
    idle = [_server(m) for m in range(6)]
    result = bottleneck_verdict(_minutes(6, 8, 8), tight, servers=idle)
    assert result["verdict"] == "provider_quota"
    assert result["evidence"]["server"]["idle"] == 4
    # Even a saturated server does not outrank the quota rule.
    full = [_server(m, waiting_mean=5.0, kv_cache_mean=0.99) for m in range(6)]
    assert bottleneck_verdict(_minutes(6, 8, 8), tight, servers=full)["verdict"] == (
        "provider_quota"
    )


def test_an_idle_server_confirms_the_cap_and_a_token_gap_is_reported() -> None:
    targets = [_target(m) for m in range(6)]
    idle = [_server(m, prompt_tokens=900.0, generation_tokens=600.0) for m in range(6)]
    result = bottleneck_verdict(_minutes(6, 8, 8), targets, servers=idle)
    assert result["verdict"] == "concurrency_cap"
    assert result["evidence"]["server_confirms_cap"] is True
    assert "confirmed by the server's own metrics" in result["reason"]
    # The server counted 1500 tokens a minute, the spans 1000: other clients or lost spans.
    tokens = result["evidence"]["server"]["tokens"]
    assert (tokens["gap"], tokens["gap_share"]) == (2000.0, 2000.0 / 6000.0)
    # Without server rows the cap verdict is inferred, and says nothing about the server.
    plain = bottleneck_verdict(_minutes(6, 8, 8), targets)
    assert plain["verdict"] == "concurrency_cap" and "server" not in plain["evidence"]
    # A server with requests waiting does not confirm the cap.
    busy = [_server(m, waiting_mean=1.0, waiting_max=2.0) for m in range(6)]
    assert (
        bottleneck_verdict(_minutes(6, 8, 8), targets, servers=busy)["evidence"][
            "server_confirms_cap"
        ]
        is False
    )


def test_serving_failures_name_the_server_signals_that_agree() -> None:
    failing = [_target(m, serving_failures=10) for m in range(6)]
    full = [_server(m, waiting_mean=5.0, kv_cache_mean=0.95) for m in range(6)]
    result = bottleneck_verdict(_minutes(6, 8, 8), failing, servers=full)
    assert result["verdict"] == "serving"
    assert result["evidence"]["serving_signals"] == ["failures", "queue", "kv_cache"]
