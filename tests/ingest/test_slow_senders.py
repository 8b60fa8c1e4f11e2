"""A stalled upload costs only its own connection (docs/ingest.md#limits).

Issue 41 reproduction: a client that declared ``Content-Length: 16777216`` and sent
nothing made every HTTP and gRPC export answer 503/UNAVAILABLE for the 90 s tested: its
declared length was charged to the in-flight body budget ahead of the bytes, and no
deadline ever released it.
"""

from __future__ import annotations

import re
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest

from tests.fixtures.servers import start_ingest, wait_for
from tests.ingest.otlp_builders import export_request, llm_span
from tests.ingest.test_grpc_ingest import export

_IN_FLIGHT = re.compile(rb"^tpmledger_ingest_body_bytes_in_flight (\S+)$", re.M)


def _stalled_upload(http_url: str, declared: int) -> socket.socket:
    parts = urlsplit(http_url)
    sock = socket.create_connection((parts.hostname, parts.port))
    sock.sendall(
        b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/x-protobuf\r\n" + f"Content-Length: {declared}\r\n\r\n".encode()
    )
    return sock


def _in_flight(http_url: str) -> float:
    match = _IN_FLIGHT.search(httpx.get(f"{http_url}/metrics", timeout=10).content)
    assert match
    return float(match.group(1))


@pytest.mark.slow
def test_a_stalled_upload_costs_only_its_own_connection(database_url: str) -> None:
    server = start_ingest(database_url, env={"TPMLEDGER_BODY_STALL_S": "3"})
    stalled = []
    try:
        # Two stalled clients, each declaring the whole 16 MiB budget.
        stalled = [_stalled_upload(server.http_url, 16 * 1024 * 1024) for _ in range(2)]
        time.sleep(0.5)
        answers = []
        for i in range(10):
            body = export_request([llm_span()], run_id="beside-stall").SerializeToString()
            http = httpx.post(
                f"{server.http_url}/v1/traces",
                content=body,
                headers={"Content-Type": "application/x-protobuf"},
                timeout=10,
            )
            answers.append(http.status_code)
            grpc_answer = export(
                server.grpc_endpoint, export_request([llm_span()], run_id=f"grpc-{i}")
            )
            assert not grpc_answer.partial_success.rejected_spans
            started = time.monotonic()
            assert httpx.get(f"{server.http_url}/healthz", timeout=5).status_code == 200
            assert time.monotonic() - started < 1.0
        assert answers == [200] * 10
        # The deadline answers the stalled uploads 408 and releases their charge.
        for sock in stalled:
            sock.settimeout(15)
            assert sock.recv(64).startswith(b"HTTP/1.1 408")
        wait_for(lambda: _in_flight(server.http_url) == 0, timeout=10)
    finally:
        for sock in stalled:
            sock.close()
        server.stop()
