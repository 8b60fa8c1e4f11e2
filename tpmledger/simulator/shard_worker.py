"""One shard: bounded in-flight calls, retries with backoff, one attempt span per HTTP try.

The loop follows the sharded pipelines in the background notes:
``self.sem = asyncio.Semaphore(LLM_CONCURRENCY)``; a failed try waits ``backoff`` (starting at
``LLM_RETRY_BACKOFF_S``, doubling, capped at 30 s — or longer when the server's Retry-After
says so) and tries again. The slot is *released* during the backoff (holding it while
sleeping would starve other calls), so each try queues for a slot anew and gets its own span:
start = admitted to a slot, end = slot released, ``tpmledger.queue.wait_s`` = time waiting
for that slot (docs/conventions.md).

``http.request.resend_count`` is set only on retries (1, 2, …), as the OTel HTTP semantic
conventions say; its absence means first attempt (docs/conventions.md: absent = 0). Every span
carries
``tpmledger.call.id``, so retry rates are always measurable.

Stopping: at the deadline the shard starts no new call and no new retry, waits for tries in
flight, then flushes; on SIGTERM/SIGINT it also cancels tries in flight (their spans end with
``error.type=cancelled``) and flushes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import httpx
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

from tpmledger.simulator.chat_client import AttemptOutcome, chat_once
from tpmledger.simulator.config import ShardConfig
from tpmledger.simulator.counters import ShardCounters
from tpmledger.simulator.workload import CallSpec, request_mix

PROVIDER_NAME = "tpmledger.simulator"
log = logging.getLogger(__name__)


def _reap(done: Iterable[asyncio.Future[Any]]) -> None:
    """Log calls that died of a bug, rather than losing the traceback."""
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            log.error("call task failed", exc_info=task.exception())


class ShardWorker:
    """Runs the calls of one shard for ``config.duration_s`` seconds."""

    def __init__(self, config: ShardConfig, tracer: Tracer, counters: ShardCounters) -> None:
        self.config = config
        self.tracer = tracer
        self.counters = counters
        self.sem = asyncio.Semaphore(config.concurrency)
        self.draining = asyncio.Event()
        server = urlsplit(config.llm_url)
        self._base_attributes: dict[str, str | int] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": PROVIDER_NAME,
            "gen_ai.request.model": config.workload.model,
            "server.address": server.hostname or "",
            "server.port": server.port or (443 if server.scheme == "https" else 80),
        }

    async def run(self, client: httpx.AsyncClient, stop: asyncio.Event) -> None:
        """Keep ``backlog_factor × cap`` calls outstanding until the deadline or ``stop``."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + self.config.duration_s
        backlog = max(1, round(self.config.backlog_factor * self.config.concurrency))
        mix = request_mix(self.config.workload, self.config.seed, self.config.shard_id)
        stop_waiter = asyncio.ensure_future(stop.wait())
        tasks: set[asyncio.Task[None]] = set()
        try:
            while not stop.is_set() and loop.time() < deadline:
                while len(tasks) < backlog:
                    tasks.add(asyncio.create_task(self._call(client, next(mix))))
                done, _ = await asyncio.wait(
                    {*tasks, stop_waiter},
                    timeout=deadline - loop.time(),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                _reap(done)
                tasks -= done
            self.draining.set()  # no new call, no new retry; waiting calls give up
            while tasks and not stop.is_set():
                done, _ = await asyncio.wait(
                    {*tasks, stop_waiter}, return_when=asyncio.FIRST_COMPLETED
                )
                _reap(done)
                tasks -= done
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            stop_waiter.cancel()
            self.counters.elapsed_s = loop.time() - started

    async def _call(self, client: httpx.AsyncClient, spec: CallSpec) -> None:
        """One logical call: tries until success, a permanent error, or the attempt limit."""
        c = self.config
        call_id = f"{c.run_id}/shard{c.shard_id}/call{spec.index}"
        backoff = c.retry_backoff_s
        resend = 0
        started = False
        try:
            while True:
                queued = time.monotonic()
                async with self.sem:
                    if self.draining.is_set():
                        break
                    if not started:
                        started = True
                        self.counters.calls_started += 1
                    queue_wait = time.monotonic() - queued
                    outcome = await self._attempt(client, spec, call_id, resend, queue_wait)
                if outcome.error_type is None:
                    self.counters.calls_ok += 1
                    return
                if not outcome.retryable or resend + 1 >= c.max_attempts:
                    self.counters.calls_failed += 1
                    return
                delay = max(backoff, outcome.retry_after_s or 0.0)
                backoff = min(backoff * 2.0, c.retry_backoff_cap_s)
                if await self._sleep_unless_draining(delay):
                    break
                resend += 1
        except asyncio.CancelledError:
            if started:
                self.counters.calls_unfinished += 1
            raise
        if started:  # stopped between tries of a started call
            self.counters.calls_unfinished += 1

    async def _sleep_unless_draining(self, delay: float) -> bool:
        """Sleep ``delay`` seconds; True if the shard started draining meanwhile."""
        try:
            await asyncio.wait_for(self.draining.wait(), timeout=delay)
        except TimeoutError:
            return False
        return True

    async def _attempt(
        self, client: httpx.AsyncClient, spec: CallSpec, call_id: str, resend: int, wait: float
    ) -> AttemptOutcome:
        """One HTTP try inside a held slot, recorded as one span over exactly that hold."""
        attributes: dict[str, str | int | float] = {
            **self._base_attributes,
            "tpmledger.call.id": call_id,
            "tpmledger.queue.wait_s": wait,
            "gen_ai.request.max_tokens": spec.max_tokens,
        }
        if resend:
            attributes["http.request.resend_count"] = resend
        if self.config.deadline_s is not None:
            attributes["tpmledger.deadline_s"] = self.config.deadline_s
        if self.config.target_cap is not None:
            attributes["tpmledger.target.concurrency.cap"] = self.config.target_cap
        span = self.tracer.start_span(
            f"chat {self.config.workload.model}",
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=time.time_ns(),
        )
        self.counters.attempts += 1
        self.counters.queue_wait_sum_s += wait
        if resend:
            self.counters.retries += 1
        outcome = AttemptOutcome(error_type="cancelled")
        try:
            outcome = await chat_once(client, self.config.llm_url, spec, self.config.workload.model)
            if outcome.error_type is None and self.config.tool_wait_s > 0:
                await self._tool(span)  # the slot stays held while the tool runs
        finally:
            self._record(span, outcome)
            span.end(end_time=time.time_ns())
            self.counters.spans_ended += 1
        return outcome

    async def _tool(self, attempt: Span) -> None:
        """A tool call in the attempt's trace, inside its slot (the "slot held by a tool"
        pitfall): an ``execute_tool`` span of ``tool_wait_s`` seconds."""
        tool = self.tracer.start_span(
            "execute_tool lookup",
            context=trace.set_span_in_context(attempt),
            kind=SpanKind.INTERNAL,
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "lookup"},
            start_time=time.time_ns(),
        )
        try:
            await asyncio.sleep(self.config.tool_wait_s)
        finally:
            tool.end(end_time=time.time_ns())
            self.counters.spans_ended += 1

    def _record(self, span: Span, outcome: AttemptOutcome) -> None:
        """Outcome attributes (docs/conventions.md) and the simulator's own counters."""
        if outcome.status_code is not None:
            span.set_attribute("http.response.status_code", outcome.status_code)
        for name, value in outcome.headers.items():
            # OTel HTTP semconv: captured response headers are string arrays.
            span.set_attribute(f"http.response.header.{name}", [value])
        if outcome.error_type is not None:
            span.set_attribute("error.type", outcome.error_type)
            span.set_status(Status(StatusCode.ERROR, outcome.error_type))
            self.counters.attempts_failed += 1
            self.counters.count_error(outcome.error_type)
            if outcome.status_code == 429:
                self.counters.rate_limited += 1
            return
        self.counters.attempts_ok += 1
        if outcome.response_model:
            span.set_attribute("gen_ai.response.model", outcome.response_model)
        if outcome.response_id:
            span.set_attribute("gen_ai.response.id", outcome.response_id)
        if outcome.finish_reasons:
            span.set_attribute("gen_ai.response.finish_reasons", outcome.finish_reasons)
        if outcome.prompt_tokens is not None:
            span.set_attribute("gen_ai.usage.input_tokens", outcome.prompt_tokens)
            self.counters.prompt_tokens += outcome.prompt_tokens
        if outcome.completion_tokens is not None:
            span.set_attribute("gen_ai.usage.output_tokens", outcome.completion_tokens)
            self.counters.completion_tokens += outcome.completion_tokens
        if outcome.ttft_s is not None:
            span.set_attribute("gen_ai.response.time_to_first_chunk", outcome.ttft_s)
            self.counters.ttft_sum_s += outcome.ttft_s
            self.counters.ttft_count += 1
