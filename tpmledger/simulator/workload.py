"""The request mix: deterministic per (seed, shard), so every run of a sweep asks the same.

A sweep compares caps under a *fixed* request mix (background: "cap selection should be
measured under fixed request mix"); drawing call ``k`` of shard ``s`` from its own seeded
generator makes the mix independent of timing, retries and concurrency.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator
from dataclasses import dataclass

from tpmledger.simulator.config import LengthDistribution, WorkloadConfig


@dataclass(frozen=True, slots=True)
class CallSpec:
    """One logical LLM call a shard will make (its retries reuse it unchanged)."""

    index: int
    prompt_tokens: int
    max_tokens: int
    stream: bool
    seed: int  # sent as the request's ``seed``: the server derives the reply length from it


def draw_length(dist: LengthDistribution, rng: random.Random) -> int:
    """One draw of a clamped log-normal length whose median is ``dist.median``."""
    value = round(rng.lognormvariate(math.log(dist.median), dist.sigma))
    return max(dist.minimum, min(dist.maximum, value))


def request_mix(workload: WorkloadConfig, seed: int, shard_id: int) -> Iterator[CallSpec]:
    """The endless, reproducible sequence of calls shard ``shard_id`` makes."""
    rng = random.Random(f"tpmledger-sim/{seed}/{shard_id}")
    index = 0
    while True:
        yield CallSpec(
            index=index,
            prompt_tokens=draw_length(workload.prompt_tokens, rng),
            max_tokens=draw_length(workload.max_completion_tokens, rng),
            stream=rng.random() < workload.stream_share,
            seed=rng.getrandbits(31),
        )
        index += 1


def prompt_text(tokens: int) -> str:
    """A prompt the simulated server counts as exactly ``tokens`` tokens (one per word)."""
    return " ".join(["tok"] * tokens)


def count_prompt_tokens(messages: object) -> int:
    """Tokens of a chat ``messages`` list as the simulated server counts them (words)."""
    if not isinstance(messages, list):
        return 0
    total = 0
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            total += len(content.split())
        elif isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    total += len(part["text"].split())
    return total
