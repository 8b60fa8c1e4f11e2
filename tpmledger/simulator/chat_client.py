"""One HTTP try of ``POST /v1/chat/completions`` (streaming or not), reduced to its outcome.

No retries here: the shard decides about retrying and records one span per try.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from tpmledger.simulator.workload import CallSpec, prompt_text


@dataclass
class AttemptOutcome:
    """What one try produced; ``error_type`` is None exactly when it succeeded."""

    status_code: int | None = None
    error_type: str | None = None
    retryable: bool = False
    retry_after_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_s: float | None = None
    finish_reasons: list[str] = field(default_factory=list)
    response_model: str | None = None
    response_id: str | None = None
    # Rate-limit response headers (lower-case names), as an HTTP instrumentation set to
    # capture them records them (docs/simulator.md#provider-quota).
    headers: dict[str, str] = field(default_factory=dict)


#: Response headers the workers capture: the provider's rate-limit state.
CAPTURED_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")
CAPTURED_NAMES = frozenset({"retry-after"})


def captured_headers(headers: httpx.Headers) -> dict[str, str]:
    """The rate-limit headers of an answer, by lower-case name."""
    return {
        name: value
        for name, value in ((k.lower(), v) for k, v in headers.items())
        if name in CAPTURED_NAMES or name.startswith(CAPTURED_PREFIXES)
    }


def retry_after(headers: httpx.Headers) -> float | None:
    """Seconds the server asked us to wait: ``retry-after-ms`` (OpenAI) or ``Retry-After``."""
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            continue  # an HTTP-date Retry-After: fall back to our own backoff
    return None


def _request_body(spec: CallSpec, model: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt_text(spec.prompt_tokens)}],
        "max_tokens": spec.max_tokens,
        "seed": spec.seed,
    }
    if spec.stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def _failed_http(response: httpx.Response) -> AttemptOutcome:
    status = response.status_code
    return AttemptOutcome(
        status_code=status,
        # OTel HTTP semconv: error.type is the status code as a string for HTTP errors.
        error_type=str(status),
        retryable=status == 429 or status >= 500,
        retry_after_s=retry_after(response.headers),
        headers=captured_headers(response.headers),
    )


def _apply_usage(outcome: AttemptOutcome, usage: Any) -> None:
    if isinstance(usage, dict):
        outcome.prompt_tokens = usage.get("prompt_tokens")
        outcome.completion_tokens = usage.get("completion_tokens")


async def _read_stream(response: httpx.Response, sent_at: float) -> AttemptOutcome:
    outcome = AttemptOutcome(status_code=response.status_code)
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        if outcome.ttft_s is None:
            # gen_ai.response.time_to_first_chunk: request sent → first chunk received.
            outcome.ttft_s = time.monotonic() - sent_at
        chunk = json.loads(data)
        outcome.response_model = outcome.response_model or chunk.get("model")
        outcome.response_id = outcome.response_id or chunk.get("id")
        for choice in chunk.get("choices") or []:
            if choice.get("finish_reason"):
                outcome.finish_reasons.append(choice["finish_reason"])
        if chunk.get("usage"):
            _apply_usage(outcome, chunk["usage"])
    return outcome


async def chat_once(
    client: httpx.AsyncClient, base_url: str, spec: CallSpec, model: str
) -> AttemptOutcome:
    """Make one try; transport failures become outcomes, cancellation propagates."""
    url = f"{base_url.rstrip('/')}/v1/chat/completions"
    sent_at = time.monotonic()
    try:
        async with client.stream("POST", url, json=_request_body(spec, model)) as response:
            if response.status_code >= 400:
                await response.aread()
                return _failed_http(response)
            if spec.stream:
                streamed = await _read_stream(response, sent_at)
                streamed.headers = captured_headers(response.headers)
                return streamed
            payload = json.loads(await response.aread())
    except httpx.TimeoutException:
        return AttemptOutcome(error_type="timeout", retryable=True)
    except httpx.TransportError as exc:
        return AttemptOutcome(error_type=type(exc).__name__, retryable=True)
    except ValueError:
        return AttemptOutcome(status_code=200, error_type="invalid_response", retryable=True)
    outcome = AttemptOutcome(
        status_code=response.status_code,
        response_model=payload.get("model"),
        response_id=payload.get("id"),
        finish_reasons=[c["finish_reason"] for c in payload.get("choices", [])],
        headers=captured_headers(response.headers),
    )
    _apply_usage(outcome, payload.get("usage"))
    return outcome
