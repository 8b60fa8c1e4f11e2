"""Two ingest processes and two analytics workers on one database give exactly what one
of each gives (docs/operations.md#replicas): the same stored spans, live rows, versions
and seals' content; no version sealed twice, no minute counted twice.

A fleet of shards exports every span twice through real OpenTelemetry SDK exporters:
once to the pair of ingest processes (even shards to one over OTLP/HTTP, odd shards to
the other over OTLP/gRPC) and once to a single ingest process on a second database.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.conftest import create_test_database, drop_test_database
from tests.fixtures.servers import RunningIngest, start_ingest, wait_for
from tpmledger.storage.server.database import raw_transaction

pytestmark = pytest.mark.slow

RUNS = ("rep-a", "rep-b")
SHARDS = 4
CALLS = 40  # per shard and wave
SECOND = 1_000_000_000
LIVE_KEYS = "run_id, minute_utc, shard_id"


class Worker:
    """A ``tpmledger serve analytics`` process."""

    def __init__(self, url: str, quiet_s: float) -> None:
        self.log = tempfile.NamedTemporaryFile(prefix="worker-", suffix=".log", delete=False)  # noqa: SIM115
        env = {
            **os.environ,
            "TPMLEDGER_DATABASE_URL": url,
            "TPMLEDGER_ANALYTICS_POLL_S": "0.3",
            "TPMLEDGER_LIVE_POLL_S": "0.1",
            "TPMLEDGER_RESEAL_QUIET_S": str(quiet_s),
            "TPMLEDGER_CHECKPOINT_EVERY_S": "0",
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tpmledger.cli.main", "serve", "analytics"],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        text = Path(self.log.name).read_text(errors="replace")
        os.unlink(self.log.name)
        return text


@pytest.fixture
def second_database(pg_server_url: str, template_database: str) -> Iterator[str]:
    url = create_test_database(pg_server_url, template_database)
    try:
        yield url
    finally:
        drop_test_database(pg_server_url, url)


def _send_wave(pair: tuple[RunningIngest, RunningIngest], single: RunningIngest, wave: int) -> None:
    """Every shard of every run sends ``CALLS`` chat spans to both destinations."""
    base = time.time_ns() - 20 * 60 * SECOND + wave * 150 * SECOND
    providers = []
    for run_id in RUNS:
        for shard in range(SHARDS):
            resource = Resource.create(
                {
                    "tpmledger.run.id": run_id,
                    "tpmledger.shard.id": str(shard),
                    "tpmledger.shard.count": SHARDS,
                }
            )
            provider = TracerProvider(resource=resource)
            to_pair: Any = (
                OTLPSpanExporter(endpoint=f"{pair[0].http_url}/v1/traces")
                if shard % 2 == 0
                else GrpcSpanExporter(endpoint=pair[1].grpc_endpoint, insecure=True)
            )
            for exporter in (to_pair, OTLPSpanExporter(endpoint=f"{single.http_url}/v1/traces")):
                provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=16))
            tracer = provider.get_tracer("fleet")
            for call in range(CALLS):
                start = base + (call * 3 + shard) * SECOND
                span = tracer.start_span("chat m", start_time=start)
                span.set_attribute("gen_ai.operation.name", "chat")
                span.set_attribute("gen_ai.request.model", "m")
                span.set_attribute("gen_ai.usage.input_tokens", 100 + call)
                span.set_attribute("gen_ai.usage.output_tokens", 10 + shard)
                span.end(end_time=start + (2 + call % 5) * SECOND)
            providers.append(provider)
    for provider in providers:
        assert provider.force_flush(timeout_millis=60_000)
        provider.shutdown()


def _rows(url: str, query: str) -> list[tuple[Any, ...]]:
    with raw_transaction(url) as conn:
        return [tuple(r) for r in conn.execute(query).fetchall()]


def _live_columns(url: str) -> str:
    rows = _rows(
        url,
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'live_minutes' "
        "AND column_name NOT IN ('computed_at', 'data_as_of') ORDER BY column_name",
    )
    return ", ".join(str(r[0]) for r in rows)


def _settled(url: str) -> Callable[[], bool]:
    return lambda: _rows(url, "SELECT count(*) FROM live_dirty") == [(0,)]


def _versions(url: str) -> list[tuple[Any, ...]]:
    return _rows(
        url,
        "SELECT run_id, version, events_sha256, events_count, merkle_root, metrics_sha256, final "
        "FROM snapshots ORDER BY run_id, version",
    )


def test_two_of_each_give_exactly_what_one_of_each_gives(
    database_url: str, second_database: str
) -> None:
    pair = (start_ingest(database_url), start_ingest(database_url))
    single = start_ingest(second_database)
    workers: list[Worker] = []
    logs: list[str] = []
    try:
        # Live phase: no seal (long quiet period); live rows drained by two workers.
        workers = [Worker(database_url, 3600), Worker(database_url, 3600)]
        workers.append(Worker(second_database, 3600))
        for wave in range(3):
            _send_wave(pair, single, wave)
        for url in (database_url, second_database):
            wait_for(_settled(url), timeout=120, interval=0.2)
        spans = (
            "SELECT run_id, shard_id, start_ns, end_ns, prompt_tokens FROM attempts "
            "ORDER BY 1, 2, 3"
        )
        stored = _rows(database_url, spans)
        assert len(stored) == 3 * len(RUNS) * SHARDS * CALLS
        assert stored == _rows(second_database, spans)
        columns = _live_columns(database_url)
        live = f"SELECT {columns} FROM live_minutes ORDER BY {LIVE_KEYS}"
        replicated = _rows(database_url, live)
        assert replicated and replicated == _rows(second_database, live)
        logs += [worker.stop() for worker in workers]

        # Seal phase: two workers seal the same due runs at the same moment.
        workers = [Worker(database_url, 0.5), Worker(database_url, 0.5)]
        workers.append(Worker(second_database, 0.5))
        for url in (database_url, second_database):
            wait_for(lambda u=url: len(_versions(u)) >= len(RUNS), timeout=180, interval=0.3)
        time.sleep(3)  # any second version (a seal twice) would appear now
        versions = _versions(database_url)
        assert versions == _versions(second_database)
        assert [v[:2] for v in versions] == [(run, 1) for run in RUNS]  # one version each
        minutes = (
            "SELECT run_id, minute_utc, shard_id, calls_in_minute, tpm_total FROM minute_metrics "
            "ORDER BY 1, 2, 3"
        )
        assert _rows(database_url, minutes) == _rows(second_database, minutes)
    finally:
        logs += [worker.stop() for worker in workers]
        for server in (*pair, single):
            server.stop()
    assert not any("Traceback" in text for text in logs), "\n".join(logs)
