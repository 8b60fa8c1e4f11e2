"""The simulated server's /metrics speaks vLLM's names, read back with tpmledger's own
scrape parser: a KV-cache-bound server shows its queue and a full cache
(docs/simulator.md#serving-side-metrics)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.simulator.test_llm_server import FAST, _body
from tpmledger.ingest.server_exposition import readings_from_exposition
from tpmledger.simulator.config import ServerConfig
from tpmledger.simulator.llm_server import build_app, reply_length


def _figures(text: str) -> dict[str, float]:
    readings = readings_from_exposition(text, "sim:1", 0)
    assert {g.key.model for g in readings.gauges} == {"sim-chat-1"}
    found = {g.field: g.value for g in readings.gauges}
    found |= {f"{c.field}_total": c.value for c in readings.counters}
    return found


def test_a_small_kv_cache_queues_requests_and_reports_it_full() -> None:
    completion, _ = reply_length(50, 5)
    per_request = 50 + completion
    config = ServerConfig(kv_cache_tokens=2 * per_request, **(FAST | {"speed": 5.0}))
    app = build_app(config)

    async def go() -> tuple[dict[str, float], dict[str, float], list[Any]]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
            calls = [
                asyncio.create_task(client.post("/v1/chat/completions", json=_body(50, 50)))
                for _ in range(8)
            ]
            await asyncio.sleep(0.05)
            during = _figures((await client.get("/metrics")).text)
            answers = await asyncio.gather(*calls)
            after = _figures((await client.get("/metrics")).text)
            return during, after, answers

    during, after, answers = asyncio.run(go())
    assert [a.status_code for a in answers] == [200] * 8  # no 429s: they wait instead
    assert during["running"] == 2 and during["waiting"] == 6
    assert during["kv_cache"] == 1.0
    assert after["running"] == 0 and after["waiting"] == 0 and after["kv_cache"] == 0
    assert after["prompt_tokens_total"] == 8 * 50
    assert after["generation_tokens_total"] == 8 * completion
    assert after["queue_count_total"] == 8 and after["ttft_count_total"] == 8
    assert after["queue_time_s_total"] > 0
    assert after["preemptions_total"] == 0
