"""The simulated server's finite capacity: a token budget and a batch whose speed drops with load.

Two limits, as in hosted LLM APIs and self-hosted engines:

* ``TokenBudget`` — a token bucket refilled at ``capacity_tpm / 60`` per second. A request is
  charged ``prompt + max_tokens`` when it arrives (how provider rate limits count); if the
  bucket cannot pay, the answer is 429 with the time until it could.
* ``BatchSlots`` — at most ``max_parallel`` requests decode at once; more wait (their TTFT
  grows with the wait), and more than ``max_queue`` waiting answer 429. Every running
  request's per-token time grows with the batch size (service time grows with load).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from tpmledger.simulator.config import ServerConfig


class TokenBudget:
    """A continuously refilled token bucket (tokens per real minute; not time-compressed)."""

    def __init__(self, capacity_tpm: int, burst_s: float) -> None:
        self.rate_per_s = capacity_tpm / 60.0
        self.size = self.rate_per_s * burst_s
        self.level = self.size
        self._stamp = time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.size, self.level + (now - self._stamp) * self.rate_per_s)
        self._stamp = now

    def try_charge(self, tokens: int) -> float | None:
        """Take ``tokens`` and return None, or take nothing and return seconds to wait."""
        self._refill()
        if self.level >= tokens:
            self.level -= tokens
            return None
        # A request larger than the bucket can never pass; it waits for a full bucket then
        # is charged on credit, rather than being refused forever.
        needed = min(tokens, self.size)
        if self.level >= needed:
            self.level -= tokens
            return None
        return (needed - self.level) / self.rate_per_s


class QueueFull(Exception):
    """More requests are waiting for a batch slot than the server accepts."""


class BatchSlots:
    """The decode batch: bounded parallelism plus a bounded waiting line."""

    def __init__(self, config: ServerConfig) -> None:
        self._config = config
        self._semaphore = asyncio.Semaphore(config.max_parallel)
        self.active = 0
        self.waiting = 0

    @asynccontextmanager
    async def slot(self, check_queue: bool = True) -> AsyncIterator[float]:
        """Hold one batch slot; yields the seconds spent waiting for it."""
        if check_queue and self.is_full():
            raise QueueFull
        queued = time.monotonic()
        self.waiting += 1
        try:
            await self._semaphore.acquire()
        finally:
            self.waiting -= 1
        self.active += 1
        try:
            yield time.monotonic() - queued
        finally:
            self.active -= 1
            self._semaphore.release()

    def is_full(self) -> bool:
        """True when a new request would exceed the waiting line."""
        return self.waiting >= self._config.max_queue and self._semaphore.locked()

    def load_factor(self) -> float:
        """Multiplier on service time from the current batch size (1 when idle)."""
        c = self._config
        return 1.0 + c.load_slope * min(1.0, self.active / c.max_parallel)

    def time_to_first_token(self, prompt_tokens: int) -> float:
        """Seconds of prefill for a request just admitted to the batch (queueing excluded)."""
        c = self._config
        prefill = c.ttft_base_s + c.prefill_s_per_token * prompt_tokens
        return prefill * self.load_factor() / c.speed

    def decode_time(self, tokens: int) -> float:
        """Seconds to decode ``tokens`` more tokens at the current batch size."""
        c = self._config
        return tokens * c.decode_s_per_token * self.load_factor() / c.speed
