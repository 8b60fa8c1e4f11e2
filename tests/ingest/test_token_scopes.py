"""Token scopes on a real ingest server with real OTel exporters (docs/ingest.md#token-scopes).

An ingest token exports spans, metrics and logs (HTTP and gRPC) and reads nothing; a read
token reads the read API and ``/metrics`` and exports nothing. Tokens stored before scopes
and ``TPMLEDGER_INGEST_TOKENS`` while no read token exists keep both.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import httpx
import psycopg
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.fixtures.servers import RunningIngest, start_ingest
from tpmledger.ingest.auth import TokenVerifier
from tpmledger.ingest.error_taxonomy import Forbidden, Unauthenticated
from tpmledger.storage.server.database import libpq_url
from tpmledger.storage.writers.ingest_tokens import create_token, hash_token
from tpmledger.token_scopes import COOKIE

RESOURCE = Resource.create({"tpmledger.run.id": "scoped", "tpmledger.shard.id": "0"})


def _spans() -> Sequence[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=RESOURCE)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("test").start_as_current_span("chat m") as span:
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.usage.input_tokens", 10)
        span.set_attribute("gen_ai.usage.output_tokens", 5)
    provider.shutdown()
    return memory.get_finished_spans()


def _attempts(url: str) -> int:
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute("SELECT count(*) FROM attempts").fetchone()
    return int(row[0]) if row else 0


@dataclass
class Scoped:
    server: RunningIngest
    ingest: str
    read: str

    def export_http(self, token: str) -> bool:
        exporter = OTLPSpanExporter(
            endpoint=f"{self.server.http_url}/v1/traces",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        try:
            return exporter.export(_spans()) == SpanExportResult.SUCCESS
        finally:
            exporter.shutdown()

    def export_grpc(self, token: str) -> bool:
        exporter = GrpcSpanExporter(
            endpoint=self.server.grpc_endpoint,
            insecure=True,
            headers={"authorization": f"Bearer {token}"},
            timeout=10,
        )
        try:
            return exporter.export(_spans()) == SpanExportResult.SUCCESS
        finally:
            exporter.shutdown()

    def export_metrics(self, token: str) -> bool:
        reader = InMemoryMetricReader()
        provider = MeterProvider(resource=RESOURCE, metric_readers=[reader])
        usage = provider.get_meter("t").create_histogram("gen_ai.client.token.usage")
        usage.record(7, {"gen_ai.token.type": "input", "gen_ai.request.model": "m"})
        data = reader.get_metrics_data()
        provider.shutdown()
        exporter = OTLPMetricExporter(
            endpoint=f"{self.server.http_url}/v1/metrics",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        try:
            return exporter.export(data).name == "SUCCESS"
        finally:
            exporter.shutdown()

    def export_logs(self, token: str) -> bool:
        memory = InMemoryLogExporter()
        provider = LoggerProvider(resource=RESOURCE)
        provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
        provider.get_logger("t").emit(body="hello")  # type: ignore[call-arg]
        records = memory.get_finished_logs()
        provider.shutdown()
        exporter = OTLPLogExporter(
            endpoint=f"{self.server.http_url}/v1/logs",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        try:
            return exporter.export(records).name == "SUCCESS"
        finally:
            exporter.shutdown()

    def get(self, path: str, token: str | None = None, **kwargs: object) -> int:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        answer = httpx.get(f"{self.server.http_url}{path}", headers=headers, timeout=30, **kwargs)  # type: ignore[arg-type]
        return answer.status_code


@pytest.fixture
def scoped(database_url: str) -> Iterator[Scoped]:
    ingest = create_token(database_url, "fleet", "ingest")
    read = create_token(database_url, "team", "read")
    server = start_ingest(database_url)
    try:
        yield Scoped(server, ingest, read)
    finally:
        server.stop()


@pytest.mark.slow
def test_an_ingest_token_exports_and_a_read_token_cannot(scoped: Scoped) -> None:
    assert scoped.export_http(scoped.ingest)
    assert scoped.export_grpc(scoped.ingest)
    assert scoped.export_metrics(scoped.ingest)
    assert scoped.export_logs(scoped.ingest)
    assert _attempts(scoped.server.database_url) == 2
    assert not scoped.export_http(scoped.read)
    assert not scoped.export_grpc(scoped.read)
    assert not scoped.export_metrics(scoped.read)
    assert not scoped.export_logs(scoped.read)
    assert _attempts(scoped.server.database_url) == 2
    assert scoped.ingest not in scoped.server.log() and scoped.read not in scoped.server.log()


@pytest.mark.slow
def test_a_read_token_reads_and_an_ingest_token_cannot(scoped: Scoped) -> None:
    # The API's own description (/docs, /redoc, /openapi.json) is read-scoped too.
    for path in ("/v1/runs", "/v1/keys", "/metrics", "/docs", "/redoc", "/openapi.json"):
        assert scoped.get(path, scoped.read) == 200, path
        assert scoped.get(path, scoped.ingest) == 403, path
        assert scoped.get(path) == 401, path
        assert scoped.get(path, "not-a-token") == 401, path
    # The dashboard's login cookie is accepted (its download links); a token in the URL is not.
    cookies = {COOKIE: scoped.read}
    assert scoped.get("/v1/keys", cookies=cookies) == 200
    assert scoped.get("/v1/keys", cookies={COOKIE: scoped.ingest}) == 403
    assert scoped.get("/v1/keys", params={"token": scoped.read}) == 401
    assert scoped.get("/healthz") == 200 and scoped.get("/readyz") == 200


@pytest.mark.slow
def test_environment_tokens_have_their_scopes(database_url: str) -> None:
    env = {
        "TPMLEDGER_INGEST_TOKENS": json.dumps(["env-ingest"]),
        "TPMLEDGER_READ_TOKENS": json.dumps(["env-read"]),
    }
    server = start_ingest(database_url, env=env)
    try:
        scoped = Scoped(server, "env-ingest", "env-read")
        assert scoped.export_http("env-ingest") and not scoped.export_http("env-read")
        assert scoped.get("/v1/runs", "env-read") == 200
        assert scoped.get("/v1/runs", "env-ingest") == 403
    finally:
        server.stop()


def test_tokens_from_before_scopes_keep_both(database_url: str) -> None:
    # A token stored before scopes ("all"), and TPMLEDGER_INGEST_TOKENS with no read token.
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO ingest_tokens (name, token_sha256, scope) VALUES ('old', %s, 'all')",
            (hash_token("old-token"),),
        )
    verifier = TokenVerifier(database_url, ["env-token"])
    verifier.load()
    for token in ("old-token", "env-token"):
        for scope in ("ingest", "read"):
            verifier.check_token(token, scope)
    # The first read token makes TPMLEDGER_INGEST_TOKENS ingest-only; "all" keeps both.
    create_token(database_url, "team", "read")
    verifier.load()
    verifier.check_token("env-token", "ingest")
    with pytest.raises(Forbidden):
        verifier.check_token("env-token", "read")
    verifier.check_token("old-token", "read")
    with pytest.raises(Unauthenticated):
        verifier.check_token(None, "read")


@pytest.mark.slow
def test_the_documented_prometheus_token_can_scrape_metrics(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 41: the docs' Prometheus example made an ingest token, which gets 403."""
    import re
    import shlex
    from pathlib import Path

    from tpmledger.cli.main import main

    docs = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    [command] = re.findall(r"`tpmledger (tokens create prometheus[^`]*)`", docs)
    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", database_url)
    assert main(shlex.split(command)) == 0
    token = capsys.readouterr().out.strip().splitlines()[0]
    server = start_ingest(database_url)
    try:
        answer = httpx.get(
            f"{server.http_url}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        assert answer.status_code == 200, answer.text
    finally:
        server.stop()
