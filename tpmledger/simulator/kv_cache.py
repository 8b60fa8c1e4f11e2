"""The simulated server's KV cache: a pool of token slots a request holds while it runs.

A request holds ``prompt + completion`` tokens from admission until its last token, as a
vLLM engine keeps a sequence's KV blocks. When the pool cannot hold the next request it
waits (in the server's queue: ``num_requests_waiting``) — unless nothing runs, so a request
larger than the pool still goes through alone. With a small pool the server is
KV-cache-bound: a long queue, the cache ≥ 90 % full, slow time to first token, and no
errors (docs/simulator.md#serving-side-metrics).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class KvCache:
    """Token slots held by running requests; ``waiting`` counts requests queued for room."""

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity = capacity_tokens
        self.used = 0
        self.holders = 0
        self.waiting = 0
        self._room = asyncio.Condition()

    def usage(self) -> float:
        """The share of the pool held (1 = full), as ``vllm:kv_cache_usage_perc`` reports."""
        return min(1.0, self.used / self.capacity)

    def _fits(self, tokens: int) -> bool:
        return self.holders == 0 or self.used + tokens <= self.capacity

    @asynccontextmanager
    async def hold(self, tokens: int) -> AsyncIterator[None]:
        """Hold ``tokens`` slots for the block, waiting (first come, first served) for room."""
        async with self._room:
            self.waiting += 1
            try:
                await self._room.wait_for(lambda: self._fits(tokens))
            finally:
                self.waiting -= 1
            self.used += tokens
            self.holders += 1
        try:
            yield
        finally:
            async with self._room:
                self.used -= tokens
                self.holders -= 1
                self._room.notify_all()
