"""The simulated server speaks enough OpenAI chat-completions for real clients, with limits."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from tests.fixtures.servers import wait_for
from tpmledger.simulator.config import ServerConfig
from tpmledger.simulator.llm_server import build_app, reply_length
from tpmledger.simulator.server_process import running_llm_server
from tpmledger.simulator.workload import prompt_text

FAST = {"speed": 50.0, "error_rate": 0.0, "timeout_rate": 0.0}


def _body(prompt: int = 10, max_tokens: int = 40, **extra: Any) -> dict[str, Any]:
    return {
        "model": "sim-chat-1",
        "messages": [{"role": "user", "content": prompt_text(prompt)}],
        "max_tokens": max_tokens,
        "seed": 5,
        **extra,
    }


def _post(config: ServerConfig, *bodies: dict[str, Any]) -> list[httpx.Response]:
    async def go() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=build_app(config))
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
            return [await client.post("/v1/chat/completions", json=b) for b in bodies]

    return asyncio.run(go())


def test_non_streaming_reply_carries_usage() -> None:
    (response,) = _post(ServerConfig(**FAST), _body(prompt=10, max_tokens=40))
    assert response.status_code == 200
    payload = response.json()
    expected_completion, finish = reply_length(40, 5)
    assert payload["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": expected_completion,
        "total_tokens": 10 + expected_completion,
    }
    assert payload["choices"][0]["finish_reason"] == finish
    assert len(payload["choices"][0]["message"]["content"].split()) == expected_completion


def test_over_budget_answers_429_with_retry_after() -> None:
    config = ServerConfig(capacity_tpm=6_000, burst_s=1.0, **FAST)  # a 100-token bucket
    ok, limited = _post(config, _body(prompt=10, max_tokens=60), _body(prompt=10, max_tokens=60))
    assert ok.status_code == 200
    assert limited.status_code == 429
    assert int(limited.headers["Retry-After"]) >= 1
    assert 0 < int(limited.headers["retry-after-ms"]) <= 1000
    assert limited.json()["error"]["type"] == "rate_limit_exceeded"


def test_error_rate_one_answers_5xx() -> None:
    config = ServerConfig(speed=50.0, error_rate=1.0)
    responses = _post(config, *[_body() for _ in range(6)])
    assert {r.status_code for r in responses} <= {500, 502, 503}


def test_bad_request_is_400() -> None:
    (response,) = _post(ServerConfig(**FAST), {"model": "x"})
    assert response.status_code == 400


def _stream(url: str, results: list[tuple[float, list[dict[str, Any]]]]) -> None:
    started = time.monotonic()
    first: float | None = None
    chunks: list[dict[str, Any]] = []
    body = _body(prompt=20, max_tokens=64, stream=True, stream_options={"include_usage": True})
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                first = first if first is not None else time.monotonic() - started
                chunks.append(json.loads(line[6:]))
    assert first is not None
    results.append((first, chunks))


@pytest.mark.slow
def test_stream_has_usage_last_and_ttft_grows_with_queueing() -> None:
    # One batch slot: the second of two concurrent streams waits for the first to finish.
    config = ServerConfig(max_parallel=1, ttft_base_s=0.05, decode_s_per_token=0.01, **FAST)
    config = config.model_copy(update={"speed": 1.0})
    with running_llm_server(config) as url:
        import threading

        results: list[tuple[float, list[dict[str, Any]]]] = []
        threads = [threading.Thread(target=_stream, args=(url, results)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    (fast_ttft, chunks), (slow_ttft, _) = sorted(results, key=lambda r: r[0])
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"] == []
    usage = chunks[-1]["usage"]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
    assert usage["completion_tokens"] == len(text.split())
    assert usage["prompt_tokens"] == 20
    assert chunks[-2]["choices"][0]["finish_reason"] in ("stop", "length")
    # The queued stream's first chunk came after the other's whole decode (≥ 32 tokens).
    assert slow_ttft > fast_ttft + 0.2


def test_stalled_request_times_the_client_out_and_ends_when_it_leaves() -> None:
    config = ServerConfig(speed=50.0, error_rate=0.0, timeout_rate=1.0)
    with running_llm_server(config) as url:
        try:
            timeout = httpx.Timeout(10.0, read=0.5)  # only the wait for the answer is short
            httpx.post(f"{url}/v1/chat/completions", json=_body(), timeout=timeout)
            raise AssertionError("a stalled request must not answer")
        except httpx.ReadTimeout:
            pass
        counts = wait_for(
            lambda: (
                (c := httpx.get(f"{url}/sim/stats").json()["counts"]).get("stall_abandoned") and c
            ),
            timeout=30,
        )
    assert counts == {"stall": 1, "stall_abandoned": 1}


def test_provider_quota_answers_429_with_rate_limit_headers() -> None:
    completion, _ = reply_length(40, 5)
    cost = 10 + completion  # prompt + reply tokens, charged on arrival
    config = ServerConfig(quota_tpm=2 * cost + 1, quota_rpm=100, capacity_tpm=10**9, **FAST)
    first, second, third = _post(config, _body(), _body(), _body())
    assert first.status_code == second.status_code == 200
    assert first.headers["x-ratelimit-limit-tokens"] == str(2 * cost + 1)
    # Unless a minute boundary passed between the two requests, the window counts both.
    if second.headers["x-ratelimit-remaining-tokens"] == "1":
        assert first.headers["x-ratelimit-remaining-tokens"] == str(cost + 1)
        assert second.headers["x-ratelimit-remaining-requests"] == "98"
        assert third.status_code == 429
        assert third.json()["error"]["type"] == "rate_limit_exceeded"
        assert 1 <= int(third.headers["Retry-After"]) <= 60
        assert third.headers["x-ratelimit-remaining-tokens"] == "1"
    assert first.headers["x-ratelimit-limit-requests"] == "100"
    assert first.headers["x-ratelimit-reset-tokens"].endswith("s")


def test_minute_quota_windows_are_utc_minutes() -> None:
    from tpmledger.simulator.capacity import MinuteQuota

    quota = MinuteQuota(quota_tpm=100, quota_rpm=2)
    minute = 1_800_000_000 // 60 * 60.0
    assert quota.try_charge(60, now=minute + 1)
    assert not quota.try_charge(60, now=minute + 2)  # 120 tokens > 100
    assert quota.try_charge(40, now=minute + 3)
    assert not quota.try_charge(0, now=minute + 4)  # a third request > 2 per minute
    assert quota.headers(now=minute + 59.5) == {
        "x-ratelimit-limit-tokens": "100",
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": "0.500s",
        "x-ratelimit-limit-requests": "2",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "0.500s",
    }
    assert quota.try_charge(100, now=minute + 60)  # the next window starts empty
    assert MinuteQuota(None, None).enabled is False
