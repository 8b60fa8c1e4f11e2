"""A finite-capacity, OpenAI-compatible ``POST /v1/chat/completions`` (streaming and not).

Behaviour per request, in order:

1. prompt tokens are counted (one per word, ``simulator.workload.count_prompt_tokens``);
2. with a provider quota (``quota_tpm`` / ``quota_rpm``), the request is counted in this
   UTC minute's window (prompt + reply tokens) — over it, 429 with ``Retry-After`` until the
   window resets; every answer carries the ``x-ratelimit-*`` headers of the window;
3. the token budget is charged ``prompt + max_tokens`` — if it cannot pay, 429 with
   ``Retry-After`` (whole seconds, RFC 9110) and ``retry-after-ms`` (as OpenAI sends);
4. a fault is drawn: ``error_rate`` answer 500/502/503, ``timeout_rate`` stall (no bytes)
   until the client gives up;
5. the request waits for room in the KV cache (``kv_cache_tokens``; it holds prompt +
   reply tokens while it runs) and a batch slot (429 when too many wait), prefills (TTFT
   grows with the wait and the batch size), then decodes ``chunk_tokens`` at a time.

``GET /metrics`` exposes vLLM's own series of all this (:mod:`simulator.server_metrics`).

The reply length comes from the request's ``seed`` (so a retried call gets the same reply):
usually 50–100 % of ``max_tokens`` with ``finish_reason`` ``stop``, sometimes all of it with
``length``. Every success carries ``usage`` (streams: in the final chunk when
``stream_options.include_usage`` is set, as OpenAI does).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import random
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tpmledger.simulator.capacity import BatchSlots, MinuteQuota, QueueFull, TokenBudget
from tpmledger.simulator.config import ServerConfig
from tpmledger.simulator.kv_cache import KvCache
from tpmledger.simulator.server_metrics import ServerMetrics
from tpmledger.simulator.workload import count_prompt_tokens


def _error(status: int, message: str, kind: str, headers: dict[str, str] | None = None) -> Response:
    body = {"error": {"message": message, "type": kind, "code": None}}
    return JSONResponse(body, status_code=status, headers=headers)


def _rate_limited(wait_s: float, why: str) -> Response:
    headers = {
        "Retry-After": str(max(1, math.ceil(wait_s))),
        "retry-after-ms": str(max(1, math.ceil(wait_s * 1000))),
    }
    return _error(429, why, "rate_limit_exceeded", headers)


def reply_length(max_tokens: int, request_seed: object) -> tuple[int, str]:
    """(completion tokens, finish reason) for a request, reproducible from its seed."""
    rng = random.Random(f"reply/{request_seed}/{max_tokens}")
    if rng.random() < 0.1:
        return max_tokens, "length"
    return max(1, round(max_tokens * rng.uniform(0.5, 1.0))), "stop"


class SimulatedLLM:
    """Server state shared by all requests: budget, batch, fault dice, counters."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.budget = TokenBudget(config.capacity_tpm, config.burst_s)
        self.quota = MinuteQuota(config.quota_tpm, config.quota_rpm)
        self.batch = BatchSlots(config)
        self.kv = KvCache(config.kv_cache_tokens)
        self.metrics = ServerMetrics(
            config.model,
            running=lambda: self.batch.active,
            waiting=lambda: self.batch.waiting + self.kv.waiting,
            kv_cache=self.kv.usage,
        )
        self._faults = random.Random(f"faults/{config.seed}")
        self.counts: dict[str, int] = {}

    def _count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1

    async def chat_completions(self, request: Request) -> Response:
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "body is not JSON", "invalid_request_error")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error(400, "messages must be a list", "invalid_request_error")
        prompt = count_prompt_tokens(body["messages"])
        max_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 256)
        if not self.quota.enabled:
            return await self._answer(request, body, prompt, max_tokens)
        completion, _ = reply_length(max_tokens, body.get("seed"))
        if not self.quota.try_charge(prompt + completion):
            self._count("429_quota")
            refused = _rate_limited(self.quota.seconds_to_reset(), "quota per minute exceeded")
            refused.headers.update(self.quota.headers())
            return refused
        headers = self.quota.headers()  # what remains once this request is counted
        response = await self._answer(request, body, prompt, max_tokens)
        response.headers.update(headers)
        return response

    async def _answer(
        self, request: Request, body: dict[str, Any], prompt: int, max_tokens: int
    ) -> Response:
        wait_s = self.budget.try_charge(prompt + max_tokens)
        if wait_s is not None:
            self._count("429_budget")
            return _rate_limited(wait_s, "token budget per minute exceeded")
        roll = self._faults.random()
        if roll < self.config.error_rate:
            status = self._faults.choice((500, 502, 503))
            self._count(f"{status}")
            await asyncio.sleep(self.config.ttft_base_s / self.config.speed)
            return _error(status, "simulated server error", "server_error")
        if roll < self.config.error_rate + self.config.timeout_rate:
            self._count("stall")
            return await self._stall(request)
        completion, finish = reply_length(max_tokens, body.get("seed"))
        options = body.get("stream_options") or {}
        if body.get("stream"):
            include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
            return await self._stream(prompt, completion, finish, include_usage)
        return await self._complete(prompt, completion, finish)

    async def _stall(self, request: Request) -> Response:
        """Send nothing until the client gives up (or ``stall_s`` passes)."""
        deadline = time.monotonic() + self.config.stall_s
        while time.monotonic() < deadline:
            if await request.is_disconnected():
                self._count("stall_abandoned")
                break
            await asyncio.sleep(0.2)
        return _error(504, "simulated stall ended", "server_error")

    @contextlib.asynccontextmanager
    async def _admitted(
        self, prompt: int, completion: int, check_queue: bool = True
    ) -> AsyncIterator[None]:
        """Wait for KV-cache room and a batch slot; prefill; count it as vLLM does."""
        if check_queue and self.batch.is_full():
            raise QueueFull
        arrived = time.monotonic()
        async with self.kv.hold(prompt + completion), self.batch.slot(check_queue=False):
            queued = time.monotonic() - arrived
            self.metrics.queue_time.observe(queued)
            self.metrics.prompt_tokens.inc(prompt)
            await asyncio.sleep(self.batch.time_to_first_token(prompt))
            self.metrics.ttft.observe(time.monotonic() - arrived)
            yield

    async def _complete(self, prompt: int, completion: int, finish: str) -> Response:
        try:
            async with self._admitted(prompt, completion):
                await asyncio.sleep(self.batch.decode_time(completion))
                self.metrics.generation_tokens.inc(completion)
        except QueueFull:
            self._count("429_queue")
            return _rate_limited(1.0, "server overloaded: too many requests waiting")
        self._count("200")
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": self.config.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": _words(completion)},
                        "finish_reason": finish,
                    }
                ],
                "usage": _usage(prompt, completion),
            }
        )

    async def _stream(self, prompt: int, completion: int, finish: str, usage: bool) -> Response:
        # Refuse before the 200 is sent when the waiting line is already full.
        if self.batch.is_full():
            self._count("429_queue")
            return _rate_limited(1.0, "server overloaded: too many requests waiting")
        self._count("200")
        return StreamingResponse(
            self._chunks(prompt, completion, finish, usage), media_type="text/event-stream"
        )

    async def _chunks(
        self, prompt: int, completion: int, finish: str, usage: bool
    ) -> AsyncIterator[bytes]:
        ident, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

        def event(delta: dict[str, Any], reason: str | None = None, **extra: Any) -> bytes:
            chunk = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.config.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
                **extra,
            }
            return f"data: {json.dumps(chunk)}\n\n".encode()

        async with self._admitted(prompt, completion, check_queue=False):
            sent, step = 0, self.config.chunk_tokens
            while sent < completion:
                n = min(step, completion - sent)
                delta: dict[str, Any] = {"content": _words(n) + " "}
                if sent == 0:
                    delta = {"role": "assistant", **delta}
                yield event(delta)
                sent += n
                self.metrics.generation_tokens.inc(n)
                await asyncio.sleep(self.batch.decode_time(n))
        yield event({}, finish)
        if usage:
            body = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": self.config.model,
                "choices": [],
                "usage": _usage(prompt, completion),
            }
            yield f"data: {json.dumps(body)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    async def prometheus(self, _request: Request) -> Response:
        """``GET /metrics``: the vLLM series (docs/simulator.md#serving-side-metrics)."""
        return Response(self.metrics.render(), media_type=self.metrics.content_type)

    async def stats(self, _request: Request) -> Response:
        """``GET /sim/stats``: answers by kind, batch occupancy, budget level."""
        return JSONResponse(
            {
                "counts": self.counts,
                "active": self.batch.active,
                "waiting": self.batch.waiting + self.kv.waiting,
                "kv_cache": self.kv.usage(),
                "budget_level": self.budget.level,
            }
        )


def _words(n: int) -> str:
    return " ".join(["tok"] * n)


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


def build_app(config: ServerConfig) -> Starlette:
    """The ASGI app of one simulated server (state lives in the returned app)."""
    llm = SimulatedLLM(config)
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", llm.chat_completions, methods=["POST"]),
            Route("/sim/stats", llm.stats, methods=["GET"]),
            Route("/metrics", llm.prometheus, methods=["GET"]),
        ]
    )
    app.state.llm = llm
    return app
