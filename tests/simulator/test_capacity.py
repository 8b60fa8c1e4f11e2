"""The token budget refuses what it cannot pay and says how long to wait; the batch bounds work."""

from __future__ import annotations

import asyncio

import pytest

from tpmledger.simulator.capacity import BatchSlots, QueueFull, TokenBudget
from tpmledger.simulator.config import ServerConfig


def test_budget_charges_until_empty_then_names_the_wait() -> None:
    budget = TokenBudget(capacity_tpm=60_000, burst_s=1.0)  # 1,000 tokens/s, bucket 1,000
    assert budget.try_charge(600) is None
    wait = budget.try_charge(600)
    assert wait is not None
    # 400 left (plus a sliver of refill): about 0.2 s until 600 are there.
    assert 0.1 < wait <= 0.2


def test_request_larger_than_the_bucket_passes_once_the_bucket_is_full() -> None:
    budget = TokenBudget(capacity_tpm=60_000, burst_s=1.0)
    assert budget.try_charge(5_000) is None  # full bucket: charged on credit
    assert budget.try_charge(1) is not None  # now in debt


def test_batch_queues_beyond_max_parallel_and_refuses_beyond_max_queue() -> None:
    async def scenario() -> tuple[float, float]:
        batch = BatchSlots(ServerConfig(max_parallel=1, max_queue=1))
        async with batch.slot() as first_wait:
            assert batch.active == 1 and batch.load_factor() == 2.0

            async def second() -> float:
                async with batch.slot() as wait:
                    return wait

            task = asyncio.create_task(second())
            await asyncio.sleep(0.05)
            assert batch.waiting == 1 and batch.is_full()
            with pytest.raises(QueueFull):
                async with batch.slot():
                    pass
        return first_wait, await task

    first_wait, second_wait = asyncio.run(scenario())
    assert first_wait < 0.01
    assert second_wait >= 0.04


def test_service_time_grows_with_load_and_shrinks_with_speed() -> None:
    config = ServerConfig(decode_s_per_token=0.01, load_slope=1.0, max_parallel=4, speed=2.0)
    batch = BatchSlots(config)
    idle = batch.decode_time(100)
    batch.active = 4
    assert idle == pytest.approx(0.5)
    assert batch.decode_time(100) == pytest.approx(1.0)
