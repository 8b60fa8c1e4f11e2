"""Memory bounds of the ingest process: small socket reads, heap tuning, small workers."""

from __future__ import annotations

import asyncio
import platform
import subprocess
import sys
from typing import Any

from tpmledger.ingest.http_protocol import BODY_HIGH_WATER, READ_BYTES, bounded_read_protocol
from tpmledger.ingest.process_memory import limit_heap_retention


def test_http_connections_read_at_most_read_bytes_at_a_time() -> None:
    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        protocol_class = bounded_read_protocol()
        seen: list[int] = []

        class Recording(protocol_class):  # type: ignore[misc,valid-type]
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                super().connection_made(transport)
                seen.append(transport.max_size)  # type: ignore[attr-defined]

        from uvicorn.config import Config
        from uvicorn.server import ServerState

        config = Config(app=lambda *a: None, log_config=None)
        config.load()
        state = ServerState()
        server = await loop.create_server(
            lambda: Recording(config=config, server_state=state, app_state={}), "127.0.0.1", 0
        )
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.02)
        writer.close()
        server.close()
        return seen[0]

    assert asyncio.run(scenario()) == READ_BYTES


def test_heap_tuning_applies_exactly_on_glibc() -> None:
    # glibc has mallopt and accepts both settings; elsewhere (musl, macOS) nothing applies.
    on_glibc = platform.libc_ver()[0] == "glibc"
    assert limit_heap_retention() is on_glibc


_WORKER_PROBE = """
import sys
import tpmledger.ingest.normalize_worker
heavy = ("grpc", "psycopg", "sqlalchemy", "fastapi", "polars")
print(",".join(m for m in heavy if m in sys.modules))
"""


def test_a_normalizer_worker_imports_only_the_normalizer() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _WORKER_PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert result.stdout.strip() == "", f"loaded in a worker: {result.stdout.strip()}"


_GC_PROBE = """
import gc
from tpmledger.ingest.process_memory import GC_THRESHOLDS, relax_garbage_collector
relax_garbage_collector()
assert gc.get_threshold() == GC_THRESHOLDS and gc.get_freeze_count() > 0
print("ok")
"""


def test_garbage_collector_is_relaxed_in_a_fresh_process() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _GC_PROBE], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "ok"


async def _serve_one_request(answer_without_reading: bool) -> tuple[list[int], int]:
    """A 300 KB POST to a uvicorn protocol of ours whose app reads nothing until the
    connection has paused; returns the buffered body sizes the app saw while waiting and
    the bytes still buffered on the connection after the answer."""
    from uvicorn.config import Config
    from uvicorn.server import ServerState

    loop = asyncio.get_running_loop()
    protocols: list[Any] = []
    buffered: list[int] = []
    answered = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        connection = protocols[0]
        for _ in range(200):  # until the socket is paused: the connection buffers no more
            await asyncio.sleep(0.01)
            buffered.append(len(connection.cycle.body))
            if connection.flow.read_paused:
                break
        if not answer_without_reading:
            while (await receive()).get("more_body"):
                pass
        status = 503 if answer_without_reading else 200
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        answered.set()

    protocol_class = bounded_read_protocol()

    class Kept(protocol_class):  # type: ignore[misc,valid-type]
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            protocols.append(self)
            super().connection_made(transport)

    config = Config(app=app, log_config=None)
    config.load()
    state = ServerState()
    server = await loop.create_server(
        lambda: Kept(config=config, server_state=state, app_state={}), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = bytes(300_000)
    writer.write(
        b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\n"
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
    )
    writer.write(body)
    await asyncio.wait_for(answered.wait(), 10)
    await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    left = len(protocols[0].cycle.body)
    writer.close()
    server.close()
    return buffered, left


def test_a_connection_buffers_at_most_a_read_and_the_high_water_mark_of_body() -> None:
    buffered, _ = asyncio.run(_serve_one_request(answer_without_reading=False))
    assert buffered and max(buffered) > 0
    assert max(buffered) <= READ_BYTES + BODY_HIGH_WATER


def test_an_answered_request_leaves_no_body_buffered_on_its_connection() -> None:
    # A 503 before the body is read: what the connection had buffered is dropped with the
    # answer, not kept until the sender's next request (after Retry-After).
    buffered, left = asyncio.run(_serve_one_request(answer_without_reading=True))
    assert max(buffered) > 0
    assert left == 0
