"""Raising the cap past the server's token budget: more 429s and retries, no more throughput.

Asserted on the simulator's own counters (tokens in successful replies, 429 answers, retried
attempts) — not on timing. A real fleet of shard processes exports to a recording OTLP
receiver.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from tests.simulator.otlp_recorder import recording_otlp_receiver
from tpmledger.simulator.config import ServerConfig
from tpmledger.simulator.fleet import FleetConfig
from tpmledger.simulator.sweep import parse_caps, run_sweep, sweep_configs


def _base(endpoint: str) -> FleetConfig:
    # Budget 10,000 tokens/s. Cap 1 × 2 shards asks for about half of it; cap 4 and cap 32
    # ask for about 2× and 15× it, so both are pinned at the budget.
    server = ServerConfig(
        capacity_tpm=600_000, burst_s=0.5, speed=20.0, error_rate=0.0, timeout_rate=0.0
    )
    return FleetConfig(
        run_id="knee",
        shards=2,
        duration_s=8.0,
        otlp_endpoint=endpoint,
        retry_backoff_s=0.05,
        max_attempts=6,
        seed=11,
        server=server,
    )


def test_sweep_configs_share_everything_but_the_cap() -> None:
    configs = sweep_configs(_base("http://x").model_copy(update={"sweep_id": None}), [1, 8])
    assert [c.run_id for c in configs] == ["knee_cap1", "knee_cap8"]
    assert {c.sweep_id for c in configs} == {"knee"}
    assert configs[0].model_dump(exclude={"run_id", "concurrency"}) == configs[1].model_dump(
        exclude={"run_id", "concurrency"}
    )


def test_parse_caps_refuses_unordered_or_non_positive() -> None:
    assert parse_caps("4, 8,16") == [4, 8, 16]
    for bad in ("8,4", "0,4", "", "4,4"):
        with pytest.raises(ValueError):
            parse_caps(bad)


@pytest.mark.slow
def test_cap_past_capacity_raises_429_and_retry_share_but_not_throughput() -> None:
    with recording_otlp_receiver() as receiver:
        results = run_sweep(_base(receiver.url), [1, 4, 32])
        received = list(receiver.spans)
    low, knee, high = (r.summary() for r in results)
    tokens = [r.total.prompt_tokens + r.total.completion_tokens for r in results]
    assert all(len(r.complete) == 2 for r in results)
    # Throughput rises up to the budget, then stops rising.
    assert tokens[1] > 1.5 * tokens[0]
    assert tokens[2] < 1.2 * tokens[1]
    # Past capacity the 429 share and the retry share climb.
    assert low["rate_limited_share"] < knee["rate_limited_share"] < high["rate_limited_share"]
    # (Far past capacity the retry share saturates: calls run out of attempts, and new calls
    # keep arriving, so it is compared with the run below capacity only.)
    assert low["retry_share"] < knee["retry_share"]
    assert low["retry_share"] < high["retry_share"]
    # Every exported span arrived; the runs form one sweep with their own caps.
    assert len(received) == sum(r.total.spans_exported for r in results)
    assert sum(r.total.spans_exported for r in results) == sum(r.total.spans_ended for r in results)
    caps = defaultdict(set)
    for span in received:
        assert span.resource["tpmledger.sweep.id"] == "knee"
        caps[span.resource["tpmledger.run.id"]].add(span.resource["tpmledger.concurrency.cap"])
    assert caps == {"knee_cap1": {1}, "knee_cap4": {4}, "knee_cap32": {32}}
    # Same request mix in every run: call k of a shard asks for the same max_tokens.
    asked: dict[str, dict[str, int]] = defaultdict(dict)
    for span in received:
        call = str(span.attributes["tpmledger.call.id"]).split("/", 1)[1]
        asked[call][span.resource["tpmledger.run.id"]] = span.attributes[
            "gen_ai.request.max_tokens"
        ]
    common = [runs for runs in asked.values() if len(runs) == 3]
    assert common and all(len(set(runs.values())) == 1 for runs in common)
