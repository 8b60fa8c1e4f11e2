"""Memory bounds of the ingest process: small socket reads, heap tuning, small workers."""

from __future__ import annotations

import asyncio
import platform
import subprocess
import sys

from tpmledger.ingest.http_protocol import READ_BYTES, bounded_read_protocol
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
