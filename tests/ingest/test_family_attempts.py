"""Every attempt, every 429, one target: the instrumentation families users run, measured
against the provider's own log (docs/conventions.md#attempts).

A fake OpenAI-compatible provider with a per-minute token budget answers 429 with
``x-ratelimit-*`` headers (tests/ingest/quota_provider.py) and logs every HTTP request.
Shard workers are real processes (tests/ingest/family_worker.py): the official ``openai``
SDK with its default two retries, one instrumentation family, and the httpx
instrumentation capturing response headers, exporting with the real OTLP/HTTP exporter
to a running ingest. Four worker minutes make a run with two inner minutes; the run is
sealed and read back through the read API. Attempts, 429s, calls, tokens, the one
target, its headroom and the ``provider_quota`` verdict must equal the provider's log.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures.servers import RunningIngest, free_port
from tests.ingest.quota_provider import (
    COMPLETION_TOKENS,
    PROMPT_TOKENS,
    QuotaProvider,
    serve_quota_provider,
)
from tpmledger.analytics.seal.sealing import seal_run

MINUTE_NS = 60_000_000_000
MINUTES = 4
CALLS_PER_MINUTE = 7
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def provider() -> Iterator[tuple[QuotaProvider, str]]:
    quota = QuotaProvider()
    with serve_quota_provider(free_port(), quota) as base_url:
        yield quota, base_url


def run_worker(spec: dict[str, Any]) -> None:
    """One worker process (its own instrumentors); fails the test with its output."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "tests.ingest.family_worker", json.dumps(spec)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]


def first_minute_ns() -> int:
    """A minute start comfortably ahead of now (workers start 5 s into each minute)."""
    now = time.time_ns()
    return now - now % MINUTE_NS + 2 * MINUTE_NS


def run_family(
    family: str, ingest: RunningIngest, quota: QuotaProvider, base_url: str, run_id: str
) -> int:
    first = first_minute_ns()
    for minute in range(MINUTES):
        if minute:
            quota.next_minute()
        run_worker(
            {
                "family": family,
                "base_url": base_url,
                "endpoint": f"{ingest.http_url}/v1/traces",
                "resource": {
                    "tpmledger.run.id": run_id,
                    "tpmledger.shard.id": "0",
                    "tpmledger.concurrency.cap": 4,
                },
                "calls": CALLS_PER_MINUTE,
                "start_ns": first + minute * MINUTE_NS + 5_000_000_000,
            }
        )
    return first


def read(ingest: RunningIngest, path: str) -> Any:
    answer = httpx.get(f"{ingest.http_url}{path}", timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.json()


def check_against_log(ingest: RunningIngest, quota: QuotaProvider, run_id: str) -> None:
    seal_run(ingest.database_url, run_id)
    log = quota.log
    ok = [a for a in log if a.status == 200]
    limited = [a for a in log if a.status == 429]
    run = read(ingest, f"/v1/runs/{run_id}")
    assert run["attempts_source"] == "http_client_spans"
    assert run["attempts"] == len(log)
    assert run["logical_calls"] == MINUTES * CALLS_PER_MINUTE
    assert run["attempt_success_rate"] == pytest.approx(len(ok) / len(log))
    # Retries: attempts after the first of their call.
    assert run["retry_rate"] == pytest.approx((len(log) - MINUTES * CALLS_PER_MINUTE) / len(log))
    assert run["tokens"]["prompt"] == len(ok) * PROMPT_TOKENS
    assert run["tokens"]["completion"] == len(ok) * COMPLETION_TOKENS
    assert sum(run["retry_causes"].values()) > 0
    minutes = read(ingest, f"/v1/runs/{run_id}/minutes")["minutes"]
    assert [m["calls_in_minute"] for m in minutes] == [
        sum(1 for a in log if a.minute == m) for m in range(MINUTES)
    ]
    assert [m["failures"] for m in minutes] == [
        sum(1 for a in limited if a.minute == m) for m in range(MINUTES)
    ]
    targets = read(ingest, f"/v1/runs/{run_id}/targets")["targets"]
    assert [(t["provider"], t["model"]) for t in targets] == [("openai", "gpt-4o-mini")]
    for m, row in enumerate(targets[0]["minutes"]):
        used = sum(a.prompt_tokens + a.completion_tokens for a in log if a.minute == m)
        assert row["used_tpm"] == used
        assert row["used_rpm"] == sum(1 for a in log if a.minute == m)
        assert row["rate_limited"] == sum(1 for a in limited if a.minute == m)
        assert row["quota_tpm"] == quota.limit_tokens
        assert row["headroom_tokens"] == pytest.approx(1 - used / quota.limit_tokens)
        assert row["min_remaining_tokens"] == min(a.remaining_tokens for a in log if a.minute == m)
    assert run["bottleneck"]["verdict"] == "provider_quota", run["bottleneck"]


@pytest.mark.slow
@pytest.mark.parametrize("family", ["openai-v2", "openllmetry", "openinference"])
def test_each_family_equals_the_providers_log(
    family: str, running_ingest: RunningIngest, provider: tuple[QuotaProvider, str]
) -> None:
    quota, base_url = provider
    run_id = f"family-{family}"
    run_family(family, running_ingest, quota, base_url, run_id)
    check_against_log(running_ingest, quota, run_id)


@pytest.mark.slow
def test_litellm_counts_its_calls_and_says_how_retries_could_be_seen(
    running_ingest: RunningIngest, provider: tuple[QuotaProvider, str]
) -> None:
    # LiteLLM's OTel callback reports each call after it ended, unlinked from the HTTP
    # requests the SDK made: attempts are its LLM spans, the SDK's retries are not seen.
    # (LiteLLM is not in the test extra: it brings ~30 packages; tested with 1.110.2.)
    pytest.importorskip("litellm")
    quota, base_url = provider
    run_family("litellm", running_ingest, quota, base_url, "family-litellm")
    seal_run(running_ingest.database_url, "family-litellm")
    run = read(running_ingest, "/v1/runs/family-litellm")
    calls = MINUTES * CALLS_PER_MINUTE
    ok = [a for a in quota.log if a.status == 200]
    assert len(quota.log) > calls
    assert (run["attempts"], run["logical_calls"]) == (calls, calls)
    assert run["attempts_source"] == "llm_spans"
    assert run["retry_rate"] is None
    assert "httpx" in run["retry_rate_not_measured_because"]
    assert run["tokens"]["prompt"] == len(ok) * PROMPT_TOKENS
    assert run["tokens"]["completion"] == len(ok) * COMPLETION_TOKENS
    targets = read(running_ingest, "/v1/runs/family-litellm/targets")["targets"]
    assert [(t["provider"], t["model"]) for t in targets] == [("openai", "gpt-4o-mini")]
    failed_calls = calls - len(ok)  # every failed call ended in a 429
    assert sum(m["rate_limited"] for m in targets[0]["minutes"]) == failed_calls
    # Rate limited, but no quota telemetry on these spans: never "demand".
    assert run["bottleneck"]["verdict"] is None
