"""Retry-After parsing, and one try reduced to its outcome (at the HTTP seam)."""

from __future__ import annotations

import asyncio

import httpx

from tpmledger.simulator.chat_client import AttemptOutcome, chat_once, retry_after
from tpmledger.simulator.workload import CallSpec


def test_retry_after_prefers_milliseconds_and_ignores_dates() -> None:
    assert retry_after(httpx.Headers({"retry-after-ms": "250", "Retry-After": "1"})) == 0.25
    assert retry_after(httpx.Headers({"Retry-After": "3"})) == 3.0
    assert retry_after(httpx.Headers({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})) is None
    assert retry_after(httpx.Headers()) is None


def _try(handler: httpx.MockTransport, stream: bool = False) -> AttemptOutcome:
    spec = CallSpec(index=0, prompt_tokens=3, max_tokens=5, stream=stream, seed=1)

    async def go() -> AttemptOutcome:
        async with httpx.AsyncClient(transport=handler) as client:
            return await chat_once(client, "http://llm", spec, "m")

    return asyncio.run(go())


def test_http_errors_become_typed_outcomes() -> None:
    limited = _try(httpx.MockTransport(lambda r: httpx.Response(429, headers={"Retry-After": "2"})))
    assert (limited.status_code, limited.error_type, limited.retryable) == (429, "429", True)
    assert limited.retry_after_s == 2.0
    bad = _try(httpx.MockTransport(lambda r: httpx.Response(400, json={})))
    assert (bad.error_type, bad.retryable) == ("400", False)

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    refused = _try(httpx.MockTransport(refuse))
    assert (refused.status_code, refused.error_type, refused.retryable) == (
        None,
        "ConnectError",
        True,
    )


def test_stream_outcome_reads_usage_finish_and_first_chunk() -> None:
    body = (
        'data: {"id": "c1", "model": "m", "choices": [{"delta": {"content": "a"}, '
        '"finish_reason": null}]}\n\n'
        'data: {"id": "c1", "model": "m", "choices": [{"delta": {}, "finish_reason": "stop"}]}\n\n'
        'data: {"id": "c1", "model": "m", "choices": [], "usage": {"prompt_tokens": 3, '
        '"completion_tokens": 1, "total_tokens": 4}}\n\n'
        "data: [DONE]\n\n"
    )
    outcome = _try(httpx.MockTransport(lambda r: httpx.Response(200, text=body)), stream=True)
    assert outcome.error_type is None
    assert (outcome.prompt_tokens, outcome.completion_tokens) == (3, 1)
    assert outcome.finish_reasons == ["stop"] and outcome.response_model == "m"
    assert outcome.ttft_s is not None and outcome.ttft_s >= 0
