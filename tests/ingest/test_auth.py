"""Bearer tokens: the verifier alone, then HTTP and gRPC on the real server."""

from __future__ import annotations

import json
from collections.abc import Iterator

import grpc
import httpx
import psycopg
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from tests.fixtures.servers import RunningIngest, start_ingest, wait_for
from tests.ingest.otlp_builders import export_request, llm_span
from tpmledger.ingest.auth import TokenVerifier, bearer_token
from tpmledger.ingest.error_taxonomy import DatabaseUnavailable, Unauthenticated
from tpmledger.settings import Settings, UnsafeConfiguration
from tpmledger.storage.database import libpq_url
from tpmledger.storage.ingest_tokens import create_token, revoke_token

PROTOBUF = {"Content-Type": "application/x-protobuf"}


def test_bearer_header_parsing() -> None:
    assert bearer_token("Bearer abc") == "abc"
    assert bearer_token("bearer  abc ") == "abc"
    for bad in (None, "", "Basic abc", "Bearer", "Bearer   ", "abc"):
        assert bearer_token(bad) is None


def test_verifier_without_tokens_accepts_everything() -> None:
    verifier = TokenVerifier(None)
    assert not verifier.required
    verifier.check_authorization(None)


@pytest.mark.slow
def test_verifier_with_static_and_stored_tokens(database_url: str) -> None:
    stored = create_token(database_url, "db")
    verifier = TokenVerifier(database_url, ["static-token"])
    verifier.load()
    assert verifier.required
    verifier.check_authorization("Bearer static-token")
    verifier.check_authorization(f"Bearer {stored}")
    for bad in (None, "Bearer wrong", f"Bearer {stored}x", "static-token"):
        with pytest.raises(Unauthenticated) as raised:
            verifier.check_authorization(bad)
        assert "wrong" not in raised.value.message and stored not in raised.value.message
    revoke_token(database_url, "db")
    verifier.load()
    with pytest.raises(Unauthenticated):
        verifier.check_authorization(f"Bearer {stored}")


def test_until_database_tokens_are_read_only_static_tokens_pass(database_url: str) -> None:
    create_token(database_url, "db")
    verifier = TokenVerifier(database_url, ["static-token"])
    verifier.check_authorization("Bearer static-token")
    for header in (None, "Bearer other"):
        with pytest.raises(DatabaseUnavailable):  # retryable, not an open door
            verifier.check_authorization(header)
    verifier.load()
    with pytest.raises(Unauthenticated):
        verifier.check_authorization(None)
    unconfigured = TokenVerifier(database_url)
    with pytest.raises(DatabaseUnavailable):
        unconfigured.check_authorization(None)


def test_non_loopback_bind_without_token_is_refused_unless_insecure() -> None:
    with pytest.raises(UnsafeConfiguration):
        Settings(host="0.0.0.0").check_bind_is_safe(has_tokens=False)
    Settings(host="0.0.0.0").check_bind_is_safe(has_tokens=True)
    Settings(host="0.0.0.0", insecure=True).check_bind_is_safe(has_tokens=False)
    Settings(host="127.0.0.1").check_bind_is_safe(has_tokens=False)


@pytest.fixture
def guarded_ingest(database_url: str) -> Iterator[tuple[RunningIngest, str]]:
    token = create_token(database_url, "fleet")
    server = start_ingest(database_url)
    try:
        yield server, token
    finally:
        server.stop()


def stored(url: str) -> int:
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute("SELECT count(*) FROM attempts").fetchone()
    return int(row[0]) if row else 0


@pytest.mark.slow
def test_http_requires_a_valid_token_and_never_logs_it(
    guarded_ingest: tuple[RunningIngest, str],
) -> None:
    server, token = guarded_ingest
    body = export_request([llm_span()]).SerializeToString()
    url = f"{server.http_url}/v1/traces"
    missing = httpx.post(url, content=body, headers=PROTOBUF)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = httpx.post(url, content=body, headers={**PROTOBUF, "Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    runs = httpx.get(f"{server.http_url}/v1/runs")
    assert runs.status_code == 401  # the read API sits behind the same auth
    assert stored(server.database_url) == 0

    auth = {"Authorization": f"Bearer {token}"}
    assert httpx.post(url, content=body, headers={**PROTOBUF, **auth}).status_code == 200
    assert stored(server.database_url) == 1
    # An ingest token writes; it does not read (docs/ingest.md#token-scopes).
    assert httpx.get(f"{server.http_url}/v1/runs", headers=auth).status_code == 403
    assert httpx.get(f"{server.http_url}/healthz").status_code == 200
    assert token not in server.log()


@pytest.mark.slow
def test_grpc_requires_a_valid_token(guarded_ingest: tuple[RunningIngest, str]) -> None:
    server, token = guarded_ingest
    request = export_request([llm_span()])
    with grpc.insecure_channel(server.grpc_endpoint) as channel:
        export = trace_service_pb2_grpc.TraceServiceStub(channel).Export
        for metadata in ((), (("authorization", "Bearer nope"),)):
            with pytest.raises(grpc.RpcError) as raised:
                export(request, metadata=metadata, timeout=10)
            assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
        export(request, metadata=(("authorization", f"Bearer {token}"),), timeout=10)
    assert stored(server.database_url) == 1
    assert token not in server.log()


@pytest.mark.slow
def test_revoked_token_stops_working_without_restart(
    guarded_ingest: tuple[RunningIngest, str],
) -> None:
    server, token = guarded_ingest
    other = create_token(server.database_url, "other")
    revoke_token(server.database_url, "fleet")
    body = export_request([llm_span()]).SerializeToString()

    def answer(tok: str) -> int:
        headers = {**PROTOBUF, "Authorization": f"Bearer {tok}"}
        return httpx.post(f"{server.http_url}/v1/traces", content=body, headers=headers).status_code

    wait_for(lambda: answer(token) == 401, timeout=20, interval=0.5)
    wait_for(lambda: answer(other) == 200, timeout=20, interval=0.5)


@pytest.mark.slow
def test_static_tokens_from_settings(database_url: str) -> None:
    server = start_ingest(database_url, env={"TPMLEDGER_INGEST_TOKENS": json.dumps(["s3cret"])})
    try:
        body = export_request([llm_span()]).SerializeToString()
        url = f"{server.http_url}/v1/traces"
        assert httpx.post(url, content=body, headers=PROTOBUF).status_code == 401
        ok = httpx.post(url, content=body, headers={**PROTOBUF, "Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert "s3cret" not in server.log()
    finally:
        server.stop()


@pytest.mark.slow
def test_serving_beyond_loopback_without_token_refuses_to_start(database_url: str) -> None:
    with pytest.raises(RuntimeError) as raised:
        start_ingest(database_url, extra_args=["--host", "0.0.0.0"], ready_timeout=30)
    assert "--insecure" in str(raised.value)
