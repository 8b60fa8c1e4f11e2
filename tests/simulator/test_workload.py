"""The request mix is reproducible per (seed, shard) and shaped like a chat workload."""

from __future__ import annotations

import itertools
import statistics

from tpmledger.simulator.config import LengthDistribution, WorkloadConfig
from tpmledger.simulator.workload import count_prompt_tokens, draw_length, prompt_text, request_mix


def test_same_seed_and_shard_give_the_same_calls() -> None:
    workload = WorkloadConfig()
    first = list(itertools.islice(request_mix(workload, seed=7, shard_id=3), 50))
    again = list(itertools.islice(request_mix(workload, seed=7, shard_id=3), 50))
    other_shard = list(itertools.islice(request_mix(workload, seed=7, shard_id=4), 50))
    assert first == again
    assert first != other_shard
    assert [c.index for c in first] == list(range(50))


def test_default_lengths_are_in_the_hundreds_and_clamped() -> None:
    calls = list(itertools.islice(request_mix(WorkloadConfig(), seed=1, shard_id=0), 2000))
    assert 300 <= statistics.median(c.prompt_tokens for c in calls) <= 500
    assert 250 <= statistics.median(c.max_tokens for c in calls) <= 450
    assert 0.75 <= sum(c.stream for c in calls) / len(calls) <= 0.85
    import random

    rng = random.Random(0)
    tight = LengthDistribution(median=100, sigma=3.0, minimum=10, maximum=200)
    draws = [draw_length(tight, rng) for _ in range(500)]
    assert min(draws) == 10 and max(draws) == 200


def test_prompt_text_is_counted_back_exactly() -> None:
    messages = [
        {"role": "system", "content": prompt_text(12)},
        {"role": "user", "content": [{"type": "text", "text": prompt_text(30)}]},
    ]
    assert count_prompt_tokens(messages) == 42
    assert count_prompt_tokens("not a list") == 0
