"""Bearer tokens: the verifier alone, then HTTP and gRPC on the real server."""

from __future__ import annotations

import asyncio
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
from tpmledger.storage.server.database import libpq_url
from tpmledger.storage.writers.ingest_tokens import create_token, revoke_token

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
def test_a_new_token_works_on_its_first_request_and_a_revoked_one_stops_within_the_refresh(
    guarded_ingest: tuple[RunningIngest, str],
) -> None:
    server, token = guarded_ingest
    body = export_request([llm_span()]).SerializeToString()

    def answer(tok: str) -> int:
        headers = {**PROTOBUF, "Authorization": f"Bearer {tok}"}
        return httpx.post(f"{server.http_url}/v1/traces", content=body, headers=headers).status_code

    assert answer(token) == 200  # the server has read its tokens
    # Created while the server runs: accepted at once (an unknown token re-reads), on
    # HTTP, on gRPC and by the read API, no polling.
    assert answer(create_token(server.database_url, "other")) == 200
    grpc_token = create_token(server.database_url, "grpc-fleet")
    with grpc.insecure_channel(server.grpc_endpoint) as channel:
        export = trace_service_pb2_grpc.TraceServiceStub(channel).Export
        export(
            export_request([llm_span()]),
            metadata=(("authorization", f"Bearer {grpc_token}"),),
            timeout=10,
        )
    reader = create_token(server.database_url, "reader", scope="read")
    runs = httpx.get(f"{server.http_url}/v1/runs", headers={"Authorization": f"Bearer {reader}"})
    assert runs.status_code == 200
    # Revoked: refused within the refresh period (5 s), without a restart.
    revoke_token(server.database_url, "fleet")
    wait_for(lambda: answer(token) == 401, timeout=7, interval=0.25)


def test_unknown_tokens_reread_at_most_once_per_interval(database_url: str) -> None:
    """A flood of unknown tokens costs one query per ``reread_min_s``, shared by all."""
    create_token(database_url, "db")
    verifier = TokenVerifier(database_url, reread_min_s=0.5)
    verifier.load()
    loads = 0
    real_load = verifier.load

    def counting_load() -> None:
        nonlocal loads
        loads += 1
        real_load()

    verifier.load = counting_load  # type: ignore[method-assign]

    async def flood() -> list[BaseException | None]:
        tries = [verifier.admit(f"unknown-{i}") for i in range(50)]
        return await asyncio.gather(*tries, return_exceptions=True)

    results = asyncio.run(flood())
    assert all(isinstance(r, Unauthenticated) for r in results)
    assert loads == 1
    fresh = create_token(database_url, "fresh")
    asyncio.run(verifier.admit(fresh))  # waits out the interval, then re-reads once
    assert loads == 2


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
