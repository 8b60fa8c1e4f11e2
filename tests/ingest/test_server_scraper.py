"""The scraper against fake vLLM and SGLang endpoints served over real HTTP
(docs/metrics.md#serving-side-metrics): per-minute rows, counter increases across a
restart, and targets that fail or hang."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from tests.fixtures.model_server_metrics import EngineFigures, FakeModelServer
from tpmledger.ingest.server_scraper import ServerScraper
from tpmledger.storage.server.database import libpq_url

MINUTE_S = 60
T0_S = 1_790_000_040  # a whole minute


def at(seconds: float) -> Any:
    return lambda: int((T0_S + seconds) * 1_000_000_000)


def rows(database_url: str) -> list[dict[str, Any]]:
    with psycopg.connect(libpq_url(database_url)) as conn:
        cur = conn.execute(
            "SELECT * FROM server_metric_minutes ORDER BY instance, engine, model, minute_utc"
        )
        names = [d.name for d in cur.description or []]
        return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


@pytest.fixture
def vllm() -> Iterator[FakeModelServer]:
    server = FakeModelServer(
        "vllm",
        model="llama-3-8b",
        engines=[
            EngineFigures(running=3, waiting=2, kv_cache=0.95, preemptions=10, prompt_tokens=1000),
            EngineFigures(running=1, waiting=4, kv_cache=0.85, preemptions=0, prompt_tokens=500),
        ],
    ).start()
    yield server
    server.stop()


def test_vllm_scrapes_become_minute_rows_with_counter_resets(
    database_url: str, vllm: FakeModelServer
) -> None:
    e0, e1 = vllm.engines
    scraper = ServerScraper(database_url, [vllm.url], clock=at(5))
    scraper.scrape_once(vllm.url)  # the counters' baseline: no increase yet
    assert rows(database_url)[0]["preemptions"] is None  # not measured, not 0
    e0.waiting, e0.kv_cache, e0.preemptions, e0.prompt_tokens = 0, 0.99, 13, 1600
    scraper._clock = at(20)
    scraper.scrape_once(vllm.url)
    vllm.restart()  # counters from zero, a new start time
    e0.preemptions, e0.prompt_tokens, e1.waiting = 2, 300, 8
    scraper._clock = at(35)
    scraper.scrape_once(vllm.url)
    scraper._clock = at(MINUTE_S + 5)  # the next minute: an unchanged scrape adds nothing
    scraper.scrape_once(vllm.url)

    first, second = rows(database_url)
    assert (first["instance"], first["engine"], first["model"], first["run_id"]) == (
        vllm.instance,
        "vllm",
        "llama-3-8b",
        "",
    )
    assert int(first["minute_utc"].timestamp()) == T0_S
    # Running and waiting add up over the two engines; KV-cache use is their mean.
    assert (first["running_sum"], first["running_count"], first["running_max"]) == (12, 3, 4)
    assert (first["waiting_sum"], first["waiting_max"]) == (6 + 4 + 8, 8)
    assert first["kv_cache_sum"] == pytest.approx(0.90 + 0.92 + 0.92)
    assert first["kv_cache_max"] == pytest.approx(0.92)
    # 10 → 13 → (restart) 2: 3 + 2 preemptions; prompt 1000 → 1600 → 300: 600 + 300.
    assert first["preemptions"] == 5
    assert first["prompt_tokens"] == 900
    assert first["queue_time_s"] == 0  # measured: it did not move
    assert second["preemptions"] == 0 and second["prompt_tokens"] == 0
    assert second["running_count"] == 1

    state = scraper.states[vllm.url]
    assert state.up is True and state.errors == {} and state.readings_total > 0
    registry = CollectorRegistry()
    registry.register(scraper.collector())
    text = generate_latest(registry).decode()
    assert f'tpmledger_scrape_up{{target="{vllm.url}"}} 1.0' in text
    assert f'tpmledger_scrape_errors_total{{stage="fetch",target="{vllm.url}"}} 0.0' in text


def test_sglang_names_fill_the_same_columns(database_url: str) -> None:
    server = FakeModelServer(
        "sglang",
        model="qwen",
        engines=[EngineFigures(running=7, waiting=3, kv_cache=0.97, preemptions=4)],
        extra_labels={"tpmledger_run_id": "run-s"},
    ).start()
    try:
        scraper = ServerScraper(database_url, [server.url], clock=at(1))
        scraper.scrape_once(server.url)
        server.engines[0].preemptions = 9
        server.engines[0].generation_tokens = 250
        scraper._clock = at(16)
        scraper.scrape_once(server.url)
    finally:
        server.stop()
    [row] = rows(database_url)
    assert (row["engine"], row["model"], row["run_id"]) == ("sglang", "qwen", "run-s")
    assert row["running_sum"] / row["running_count"] == 7
    assert row["kv_cache_max"] == pytest.approx(0.97)
    assert row["preemptions"] == 5  # retracted requests
    assert row["generation_tokens"] == 250


def _silent_listener() -> socket.socket:
    """Accepts connections (the kernel does) and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    return listener


def test_a_hanging_or_dead_target_fails_alone_within_its_deadline(
    database_url: str, vllm: FakeModelServer
) -> None:
    listener = _silent_listener()
    hanging = f"http://127.0.0.1:{listener.getsockname()[1]}/metrics"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}/metrics"  # nobody listens
    scraper = ServerScraper(database_url, [hanging, dead, vllm.url], interval_s=2, timeout_s=0.5)
    try:
        began = time.monotonic()
        scraper.start()
        time.sleep(1.2)
        # The healthy target was read at once, not after the hanging one's timeout.
        assert scraper.states[vllm.url].up is True
        assert scraper.states[vllm.url].last_duration_s is not None
        assert scraper.states[vllm.url].last_duration_s < 0.5
        assert scraper.states[hanging].up is False
        assert scraper.states[hanging].errors == {"fetch": 1}
        assert scraper.states[dead].up is False
        assert time.monotonic() - began < 2
    finally:
        scraper.stop()
        listener.close()
    assert rows(database_url)  # the healthy target's readings were stored


def test_a_server_not_answering_yet_at_start_is_one_quiet_line_then_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # `up --demo` starts its simulated server beside ingest: the first scrape may come before
    # it listens. A newcomer saw a WARNING for that on every start.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/metrics"  # nothing listens there
    scraper = ServerScraper("postgresql://unused", [url], interval_s=0.1, timeout_s=0.1)
    with caplog.at_level(logging.DEBUG, logger="tpmledger.ingest.server_scraper"):
        for _ in range(4):
            scraper.scrape_once(url)
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in lines] == [
        logging.INFO,
        logging.WARNING,
        logging.DEBUG,
        logging.DEBUG,
    ]
    assert lines[0][1].startswith(f"no answer yet from {url}")
    assert lines[1][1].startswith(f"still no answer from {url}")
    assert scraper.states[url].errors == {"fetch": 4}
