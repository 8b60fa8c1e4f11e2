"""The simulated server's finite capacity: a token budget and a batch whose speed drops with load.

Two limits, as in hosted LLM APIs and self-hosted engines:

* ``TokenBudget`` — a token bucket refilled at ``capacity_tpm / 60`` per second. A request is
  charged ``prompt + max_tokens`` when it arrives (how provider rate limits count); if the
  bucket cannot pay, the answer is 429 with the time until it could.
* ``MinuteQuota`` — a provider's quota per UTC minute window (``quota_tpm`` / ``quota_rpm``),
  off by default: a request is charged its prompt + reply tokens when it arrives; over
  either limit it is answered 429, and every answer reports the window's limits and what
  remains (``x-ratelimit-*`` headers, as OpenAI sends them).
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


class MinuteQuota:
    """A provider quota per UTC minute window: tokens (``quota_tpm``) and requests
    (``quota_rpm``), either ``None`` for no limit."""

    def __init__(self, quota_tpm: int | None, quota_rpm: int | None) -> None:
        self.quota_tpm = quota_tpm
        self.quota_rpm = quota_rpm
        self._window = -1
        self.tokens = 0
        self.requests = 0

    @property
    def enabled(self) -> bool:
        return self.quota_tpm is not None or self.quota_rpm is not None

    def _roll(self, now: float) -> None:
        window = int(now // 60)
        if window != self._window:
            self._window, self.tokens, self.requests = window, 0, 0

    def try_charge(self, tokens: int, now: float | None = None) -> bool:
        """Count one request of ``tokens`` in this minute's window, or refuse it (False)."""
        now = time.time() if now is None else now
        self._roll(now)
        over_tokens = self.quota_tpm is not None and self.tokens + tokens > self.quota_tpm
        over_requests = self.quota_rpm is not None and self.requests + 1 > self.quota_rpm
        if over_tokens or over_requests:
            return False
        self.tokens += tokens
        self.requests += 1
        return True

    def headers(self, now: float | None = None) -> dict[str, str]:
        """The rate-limit headers of an answer given now (limits, remaining, reset)."""
        now = time.time() if now is None else now
        self._roll(now)
        reset = f"{60 - now % 60:.3f}s"
        headers: dict[str, str] = {}
        if self.quota_tpm is not None:
            headers["x-ratelimit-limit-tokens"] = str(self.quota_tpm)
            headers["x-ratelimit-remaining-tokens"] = str(max(self.quota_tpm - self.tokens, 0))
            headers["x-ratelimit-reset-tokens"] = reset
        if self.quota_rpm is not None:
            headers["x-ratelimit-limit-requests"] = str(self.quota_rpm)
            headers["x-ratelimit-remaining-requests"] = str(max(self.quota_rpm - self.requests, 0))
            headers["x-ratelimit-reset-requests"] = reset
        return headers

    def seconds_to_reset(self, now: float | None = None) -> float:
        """Seconds until the next window opens."""
        now = time.time() if now is None else now
        return 60 - now % 60


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
