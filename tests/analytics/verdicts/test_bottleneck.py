"""The bottleneck verdict and quota headroom of runs with known properties, sent through the
real OTLP exporters to a running ingest (docs/metrics.md#bottleneck, #quota-headroom)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.analytics.bottleneck_runs import (
    HEADER,
    MINUTE_NS,
    QUOTA_TPM,
    RUNS,
    RunSpec,
    base_minute_ns,
    minute_text,
    record_run,
)
from tests.fixtures.servers import RunningIngest
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.analytics.proofs.summary_export import snapshot_predicate
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.analytics.verdicts.bottleneck import BottleneckParams, bottleneck_verdict
from tpmledger.storage.readers.target_minutes import TargetMinute
from tpmledger.storage.server.database import in_one_snapshot

EXPECTED = {
    "quota-bound": "provider_quota",
    "cap-bound": "concurrency_cap",
    "serving": "serving",
    "demand": "demand",
    "no-cap": None,
}


def export(spans: list[ReadableSpan], ingest: RunningIngest, grpc: bool = False) -> None:
    if grpc:
        exporter: Any = GrpcSpanExporter(endpoint=ingest.grpc_endpoint, insecure=True, timeout=30)
    else:
        exporter = OTLPSpanExporter(endpoint=f"{ingest.http_url}/v1/traces", timeout=30)
    for start in range(0, len(spans), 400):
        assert exporter.export(spans[start : start + 400]) == SpanExportResult.SUCCESS
    exporter.shutdown()


def get(ingest: RunningIngest, path: str) -> dict[str, Any]:
    answer = httpx.get(f"{ingest.http_url}/v1{path}", timeout=30)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


@pytest.mark.slow
def test_five_runs_get_their_bottleneck_live_and_sealed(running_ingest: RunningIngest) -> None:
    base = base_minute_ns()
    for name, spec in RUNS.items():
        export(record_run(spec, base), running_ingest, grpc=name == "serving")
    LiveUpdater(running_ingest.database_url).update_once()  # what the analytics worker does
    inner = [minute_text(base, m) for m in range(1, 5)]

    for name, expected in EXPECTED.items():
        live = get(running_ingest, f"/runs/{name}")["bottleneck"]
        assert live["verdict"] == expected, (name, live)
        assert live["live"] is True
        assert live["params"] == BottleneckParams().as_dict()
        sealed = seal_run(running_ingest.database_url, name).metrics["bottleneck"]
        assert {k: v for k, v in live.items() if k not in ("live", "counted")} == sealed
        # The signed predicate carries the verdict of the version it signs.
        predicate = in_one_snapshot(running_ingest.database_url, snapshot_predicate, name)
        assert predicate["bottleneck"] == sealed
        read = get(running_ingest, f"/runs/{name}")["bottleneck"]
        assert read.pop("counted").startswith("The verdict counts the ")  # said when read
        assert read == sealed

    quota = get(running_ingest, "/runs/quota-bound")["bottleneck"]
    assert quota["minutes"] == inner
    assert quota["evidence"] | {"rate_limited": 12, "attempts": 192} == quota["evidence"]
    assert "6.25 % of attempts were rate limited" in quota["reason"]
    assert quota["counted"] == (
        "The verdict counts the 192 of the run's 288 attempts that ended in its 4 inner "
        "minutes (strictly between the first and the last minute, which are partial); the "
        "run's attempt count includes every minute."
    )
    cap = get(running_ingest, "/runs/cap-bound")["bottleneck"]
    assert cap["minutes"] == inner and cap["evidence"]["lowest_headroom"] == 0.5
    serving = get(running_ingest, "/runs/serving")["bottleneck"]
    assert serving["minutes"] == inner and serving["evidence"]["serving_failures"] == 16
    demand = get(running_ingest, "/runs/demand")["bottleneck"]
    assert demand["minutes"] == inner and "in 4 of 4 minutes" in demand["reason"]
    no_cap = get(running_ingest, "/runs/no-cap")["bottleneck"]
    assert no_cap["minutes"] == [] and "no concurrency cap declared" in no_cap["reason"]

    # Headroom per minute, by hand: 45 successes × 150 tokens of 7200, 48 requests of 500.
    body = get(running_ingest, "/runs/quota-bound/targets")
    assert body["quota_values_ignored"] == 0
    [target] = body["targets"]
    assert (target["provider"], target["model"]) == ("openai", "gpt-test")
    minutes = {m["minute_utc"]: m for m in target["minutes"]}
    assert len(minutes) == 6
    for index in range(6):
        edge = index in (0, 5)
        used = 48 * 150 if edge else 45 * 150
        assert minutes[minute_text(base, index)] == {
            "minute_utc": minute_text(base, index),
            "quota_tpm": QUOTA_TPM,
            "quota_rpm": 500,
            "used_tpm": used,
            "used_rpm": 48,
            "headroom_tokens": 1 - used / QUOTA_TPM,
            "headroom_requests": 1 - 48 / 500,
            "min_remaining_tokens": QUOTA_TPM - 150 * 47,
            "min_remaining_requests": None,
            "rate_limited": 0 if edge else 3,
        }
    declared = get(running_ingest, "/runs/cap-bound/targets")["targets"][0]["minutes"]
    assert {(m["quota_tpm"], m["headroom_tokens"], m["quota_rpm"]) for m in declared} == {
        (14400, 0.5, None)
    }
    assert (
        get(running_ingest, "/runs/no-cap/targets")["targets"][0]["minutes"][0]["headroom_tokens"]
        is None
    )
    missing = httpx.get(f"{running_ingest.http_url}/v1/runs/nope/targets", timeout=30)
    assert missing.status_code == 404


def _garbage(m: int, lane: int, i: int) -> dict[str, Any]:
    """Lane 0 reports garbage; the others a quota as strings, arrays and a newer value."""
    if lane == 0:
        return {
            HEADER + "x-ratelimit-limit-tokens": ["plenty"],
            HEADER + "x-ratelimit-remaining-tokens": "-5",
            HEADER + "retry-after": ["Wed, 21 Oct 2026 07:28:00 GMT"],
        }
    if lane == 1:
        return {HEADER + "anthropic-ratelimit-tokens-limit": "9000"}
    return {HEADER + "x-ratelimit-limit-tokens": ["9000"]}


@pytest.mark.slow
def test_garbage_header_values_are_counted_and_poison_no_minute(
    running_ingest: RunningIngest,
) -> None:
    base = base_minute_ns()
    spec = RunSpec("garbage", lanes=3, cap=3, shape=_garbage)
    export(record_run(spec, base), running_ingest)
    LiveUpdater(running_ingest.database_url).update_once()
    body = get(running_ingest, "/runs/garbage/targets")
    assert body["quota_values_ignored"] == 6 * 6 * 3  # 3 values × lane 0's 36 attempts
    [target] = body["targets"]
    for minute in target["minutes"]:
        assert minute["quota_tpm"] == 9000
        assert minute["used_tpm"] == 18 * 150
        assert minute["headroom_tokens"] == 1 - 18 * 150 / 9000
        assert minute["min_remaining_tokens"] is None
    run = get(running_ingest, "/runs/garbage")
    assert run["bottleneck"]["evidence"]["quota_values_ignored"] == 108
    assert run["bottleneck"]["verdict"] == "concurrency_cap"


def _target(minute: int, **fields: Any) -> TargetMinute:
    values: dict[str, Any] = {
        "run_id": "r",
        "provider": "openai",
        "model": "m",
        "minute_ns": minute * MINUTE_NS,
        "used_tpm": 1000,
        "used_rpm": 100,
        "rate_limited": 0,
        "serving_failures": 0,
        "quota_tpm": None,
        "quota_rpm": None,
        "min_remaining_tokens": None,
        "min_remaining_requests": None,
        "values_ignored": 0,
    }
    return TargetMinute(**(values | fields))


def _minutes(n: int, in_flight: float, cap: int | None) -> list[dict[str, Any]]:
    return [
        {"minute_ns": m * MINUTE_NS, "in_flight_mean": in_flight, "concurrency_cap": cap}
        for m in range(n)
    ]


def test_rules_that_need_missing_telemetry_say_what_is_missing() -> None:
    assert bottleneck_verdict(_minutes(2, 8, 8), [_target(0), _target(1)])["verdict"] is None
    # 5 % rate limited, no quota reported anywhere: not the quota, not the cap either.
    limited = [_target(m, rate_limited=5) for m in range(5)]
    result = bottleneck_verdict(_minutes(5, 8, 8), limited)
    assert result["verdict"] is None and "no quota telemetry" in result["reason"]
    assert len(result["minutes"]) == 3
    # The cap is full but the quota is nearly used up too: both bind, no verdict.
    tight = [_target(m, quota_tpm=1100) for m in range(5)]
    both = bottleneck_verdict(_minutes(5, 8, 8), tight)
    assert both["verdict"] is None and "cap and quota bind together" in both["reason"]
    # A low remaining count is evidence of the quota even when headroom is not known.
    remaining = [
        _target(m, rate_limited=2, quota_rpm=1000, min_remaining_requests=50) for m in range(5)
    ]
    assert bottleneck_verdict(_minutes(5, 2, 8), remaining)["verdict"] == "provider_quota"
    # Thresholds are parameters: at a 1 % serving threshold, 2 % failures are the verdict.
    failing = [_target(m, serving_failures=2) for m in range(5)]
    assert bottleneck_verdict(_minutes(5, 2, 8), failing)["verdict"] == "demand"
    strict = BottleneckParams(serving_failure_share=0.01)
    result = bottleneck_verdict(_minutes(5, 2, 8), failing, strict)
    assert result["verdict"] == "serving" and result["params"]["serving_failure_share"] == 0.01
