"""The bottleneck of runs whose servers report their own metrics, end to end: spans through
the real OTLP exporter to a running ingest, server minutes through the real scraper from a
fake vLLM endpoint, the verdict live and sealed (docs/metrics.md#bottleneck)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.analytics.bottleneck_runs import (
    MINUTE_NS,
    MINUTES,
    RunSpec,
    base_minute_ns,
    minute_text,
    quota_bound,
    record_run,
)
from tests.analytics.verdicts.test_bottleneck import export, get
from tests.fixtures.model_server_metrics import EngineFigures, FakeModelServer
from tests.fixtures.servers import RunningIngest
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.analytics.proofs.verification import verify_run
from tpmledger.analytics.seal.run_computation import in_seal_view
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.ingest.server_scraper import ServerScraper


def _model(name: str) -> Any:
    return lambda m, lane, i: {"gen_ai.request.model": name}


def _slow_model(name: str) -> Any:
    # No 429s, no failures: the client only sees a slow first token.
    return lambda m, lane, i: {
        "gen_ai.request.model": name,
        "gen_ai.server.time_to_first_token": 4.0,
    }


def _scrape_minutes(
    database_url: str, server: FakeModelServer, base_ns: int, figures: EngineFigures
) -> None:
    """Two scrapes per minute of the run, dated in its minutes (the scraper's clock)."""
    engine = server.engines[0]
    clock = {"ns": base_ns}
    scraper = ServerScraper(database_url, [server.url], clock=lambda: clock["ns"])
    for m in range(MINUTES):
        for second in (10, 40):
            engine.running, engine.waiting, engine.kv_cache = (
                figures.running,
                figures.waiting,
                figures.kv_cache,
            )
            engine.preemptions += figures.preemptions
            engine.prompt_tokens += figures.prompt_tokens
            engine.generation_tokens += figures.generation_tokens
            clock["ns"] = base_ns + m * MINUTE_NS + second * 1_000_000_000
            scraper.scrape_once(server.url)
        assert scraper.states[server.url].up


@pytest.mark.slow
def test_a_kv_cache_bound_fleet_is_serving_live_and_sealed(
    running_ingest: RunningIngest,
) -> None:
    base = base_minute_ns()
    # Cap 8 of which 6 are used: without the server's metrics this run is "demand".
    spec = RunSpec("kv-bound", lanes=6, cap=8, shape=_model("llama-kv"))
    export(record_run(spec, base), running_ingest)
    server = FakeModelServer("vllm", model="llama-kv").start()
    try:
        busy = EngineFigures(running=6, waiting=5, kv_cache=0.96, prompt_tokens=1800)
        _scrape_minutes(running_ingest.database_url, server, base, busy)
    finally:
        server.stop()
    LiveUpdater(running_ingest.database_url).update_once()

    live = get(running_ingest, "/runs/kv-bound")["bottleneck"]
    assert live["verdict"] == "serving", live
    assert live["evidence"]["serving_signals"] == ["queue", "kv_cache"]
    assert live["evidence"]["rate_limited"] == 0
    assert live["minutes"] == [minute_text(base, m) for m in range(1, 5)]
    assert live["evidence"]["server"]["kv_cache"] == 4
    sealed = seal_run(running_ingest.database_url, "kv-bound").metrics["bottleneck"]
    # "counted" (the verdict's scope in words) is added on read, never sealed.
    assert {k: v for k, v in live.items() if k not in ("live", "counted")} == sealed
    # The verifier recomputes the sealed verdict with the same server minutes.
    report = in_seal_view(running_ingest.database_url, verify_run, "kv-bound")
    assert report.mismatches == [], report.mismatches

    [entry] = get(running_ingest, "/runs/kv-bound/servers")["servers"]
    assert (entry["instance"], entry["engine"], entry["model"]) == (
        server.instance,
        "vllm",
        "llama-kv",
    )
    assert len(entry["minutes"]) == MINUTES
    second = entry["minutes"][1]
    assert second == {
        "minute_utc": minute_text(base, 1),
        "running_mean": 6,
        "waiting_mean": 5,
        "waiting_max": 5,
        "kv_cache_mean": 0.96,
        "kv_cache_max": 0.96,
        "preemptions": 0,
        "prompt_tokens": 3600,
        "generation_tokens": 0,
    }
    assert entry["minutes"][0]["prompt_tokens"] == 1800  # the first scrape is the baseline
    missing = httpx.get(f"{running_ingest.http_url}/v1/runs/nope/servers", timeout=30)
    assert missing.status_code == 404


@pytest.mark.slow
def test_a_quota_bound_run_stays_provider_quota_though_its_server_is_idle(
    running_ingest: RunningIngest,
) -> None:
    base = base_minute_ns()

    def shape(m: int, lane: int, i: int) -> dict[str, Any]:
        return {**quota_bound(m, lane, i), "gen_ai.request.model": "llama-q"}

    export(record_run(RunSpec("quota-idle", shape=shape), base), running_ingest)
    # The server names the run explicitly (another model name, so only the label joins).
    server = FakeModelServer(
        "vllm", model="served-elsewhere", extra_labels={"tpmledger_run_id": "quota-idle"}
    ).start()
    try:
        idle = EngineFigures(running=2, waiting=0, kv_cache=0.2)
        _scrape_minutes(running_ingest.database_url, server, base, idle)
    finally:
        server.stop()
    LiveUpdater(running_ingest.database_url).update_once()
    verdict = get(running_ingest, "/runs/quota-idle")["bottleneck"]
    assert verdict["verdict"] == "provider_quota"
    assert verdict["evidence"]["server"]["queue"] == 0
    assert verdict["evidence"]["server"]["idle"] == 4
    [entry] = get(running_ingest, "/runs/quota-idle/servers")["servers"]
    assert entry["model"] == "served-elsewhere"
