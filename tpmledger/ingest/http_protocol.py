"""uvicorn's HTTP protocol with smaller socket reads (README.md#benchmarks: bounded memory under
overload).

asyncio reads up to 256 KiB per ``recv`` and uvicorn appends each read to the request's
body buffer before its flow control (64 KiB high-water mark) pauses the socket. An OTLP
batch is a few hundred KiB, so under overload every open connection parked about a
quarter megabyte in the process even when its request was answered 503 without reading
the body: 480 senders meant ~120 MiB (bench/ingest_overload.py). Reading 64 KiB at a time
keeps a connection's buffered body near the high-water mark; the kernel's socket buffer
holds the rest, outside the process.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

READ_BYTES: Final = 64 * 1024


def bounded_read_protocol() -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol (h11 when httptools is missing) reading ``READ_BYTES``."""
    base: Any
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:  # pragma: no cover - httptools is a dependency
        from uvicorn.protocols.http.h11_impl import H11Protocol as base

    class BoundedReadProtocol(base):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            if hasattr(transport, "max_size"):  # asyncio's selector transports
                transport.max_size = READ_BYTES

    return BoundedReadProtocol
