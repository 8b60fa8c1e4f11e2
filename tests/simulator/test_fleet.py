"""A real 8-process fleet against a running tpmledger ingest: every exported span is stored.

One minute of 8 shards × 16 (the LLM server is time-compressed 2×; the fleet, the HTTP calls,
the OTLP exporters and ingest are all real). The simulator's own counters are compared with
the rows ingest committed.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import psycopg
import pytest

from tests.conftest import create_test_database, drop_test_database
from tests.fixtures.servers import RunningIngest, start_ingest
from tpmledger.simulator.config import ServerConfig
from tpmledger.simulator.fleet import FleetConfig, run_fleet
from tpmledger.storage.server.database import libpq_url

RUN_ID = "sim_fleet_test_sharded"


@pytest.fixture(scope="module")
def fleet_ingest(pg_server_url: str, template_database: str) -> Iterator[RunningIngest]:
    """One real ingest for the module's runs (they differ by run id); saves a start-up."""
    url = create_test_database(pg_server_url, template_database)
    server = start_ingest(url)
    try:
        yield server
    finally:
        server.stop()
        drop_test_database(pg_server_url, url)


@pytest.mark.slow
def test_one_minute_8x16_fleet_stores_every_exported_span(fleet_ingest: RunningIngest) -> None:
    # Budget a little under what 128 calls in flight ask for, plus 2 % 5xx and a few stalls:
    # retries of every kind, while most calls succeed.
    server = ServerConfig(speed=2.0, capacity_tpm=1_100_000, error_rate=0.02, timeout_rate=0.002)
    config = FleetConfig(
        run_id=RUN_ID,
        shards=8,
        concurrency=16,
        duration_s=60.0,
        otlp_endpoint=fleet_ingest.http_url,
        retry_backoff_s=0.2,
        request_timeout_s=5.0,
        server=server,
    )
    result = run_fleet(config)
    total = result.total
    assert result.complete == set(range(8)) and set(result.exit_codes.values()) == {0}
    assert total.spans_ended == total.spans_exported > 1000
    assert total.spans_export_failed == 0

    with psycopg.connect(libpq_url(fleet_ingest.database_url)) as conn:
        row = conn.execute(
            """
            SELECT count(*), count(DISTINCT shard_id), count(*) FILTER (WHERE resend_count > 0),
                   max(resend_count), count(ttft_s), count(queue_wait_s),
                   count(*) FILTER (WHERE queue_wait_s > 0), coalesce(sum(prompt_tokens), 0),
                   coalesce(sum(completion_tokens), 0), count(*) FILTER (WHERE status = 'error'),
                   count(*) FILTER (WHERE error_type = '429'), count(DISTINCT call_id),
                   min(declared_shard_count), max(concurrency_cap)
            FROM attempts WHERE run_id = %s
            """,
            (RUN_ID,),
        ).fetchone()
    assert row is not None
    (stored, shards, retried, max_resend, ttfts, waits, positive_waits, prompt, completion,
     errors, limited, calls, declared, cap) = row  # fmt: skip
    # Count exported by the SDK = count stored.
    assert stored == total.spans_exported
    assert shards == 8 and declared == 8 and cap == 16
    assert retried == total.retries > 0 and max_resend >= 1
    assert ttfts == total.ttft_count > 0
    assert waits == stored and positive_waits > 0
    assert (prompt, completion) == (total.prompt_tokens, total.completion_tokens)
    assert errors == total.attempts_failed and limited == total.rate_limited
    assert calls == total.calls_started

    runs = httpx.get(f"{fleet_ingest.http_url}/v1/runs", timeout=10).json()["runs"]
    (listed,) = [r for r in runs if r["run_id"] == RUN_ID]
    assert listed["shard_count"] == 8 and listed["attempts"] == stored


@pytest.mark.slow
def test_grpc_export_stores_every_span_too(fleet_ingest: RunningIngest) -> None:
    config = FleetConfig(
        run_id="sim_grpc_test",
        shards=2,
        concurrency=4,
        duration_s=3.0,
        otlp_endpoint=f"http://{fleet_ingest.grpc_endpoint}",
        otlp_protocol="grpc",
        retry_backoff_s=0.05,
        server=ServerConfig(speed=20.0, error_rate=0.1, timeout_rate=0.0),
    )
    total = run_fleet(config).total
    assert total.spans_ended == total.spans_exported > 0
    with psycopg.connect(libpq_url(fleet_ingest.database_url)) as conn:
        row = conn.execute(
            "SELECT count(*), count(DISTINCT shard_id) FROM attempts WHERE run_id = %s",
            ("sim_grpc_test",),
        ).fetchone()
    assert row == (total.spans_exported, 2)
