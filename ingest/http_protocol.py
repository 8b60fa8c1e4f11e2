"""uvicorn's HTTP protocol with small socket reads and a small body buffer per connection
(README.md#benchmarks: bounded memory under overload).

asyncio reads up to 256 KiB per ``recv`` and uvicorn appends each read to the request's
body buffer until its flow control (64 KiB high-water mark) pauses the socket. An OTLP
batch is a few hundred KiB, so under overload every open connection parked a slice of its
body in the process, whether or not the request would be admitted:

- reads of 256 KiB: ~120 MiB with 480 senders (bench/ingest_overload.py);
- reads of 64 KiB: still up to 64 + 64 KiB per connection, and the buffer of a request
  answered 503 without reading its body stayed until the connection's next request
  (senders wait out Retry-After first). With 570 connections that was ~35-40 MiB of live
  heap, plus the fragmentation it left (measured with ``mallinfo2`` in the ingest process).

So a connection now reads :data:`READ_BYTES` at a time and pauses once
:data:`BODY_HIGH_WATER` bytes wait for the handler (at most about their sum per
connection); the kernel's socket buffer holds the rest, outside the process. The buffer
of a request whose answer is sent is dropped at once: nobody reads it any more (uvicorn
discards the rest of such a body as it arrives). The cost is more reads per body: a
512-span batch (~270 KB) takes ~17 reads instead of ~5, ~0.3-0.5 ms more CPU per request
in the listener's process (3.0 → 3.3-3.5 ms), against ~30 requests/s at full speed.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

READ_BYTES: Final = 16 * 1024
# Body bytes a connection buffers before its socket is paused (uvicorn's default: 64 KiB).
BODY_HIGH_WATER: Final = 16 * 1024


def bounded_read_protocol() -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol (h11 when httptools is missing) reading ``READ_BYTES``
    at a time and buffering about ``BODY_HIGH_WATER`` body bytes per connection."""
    base: Any
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:  # pragma: no cover - httptools is a dependency
        from uvicorn.protocols.http.h11_impl import H11Protocol as base

        return _with_small_reads(base)

    class BoundedBodyProtocol(_with_small_reads(base)):  # type: ignore[misc]
        def on_body(self, body: bytes) -> None:
            super().on_body(body)  # buffers it, pausing the socket past 64 KiB
            if len(self.cycle.body) > BODY_HIGH_WATER:
                self.flow.pause_reading()  # idempotent

    return BoundedBodyProtocol


def _with_small_reads(base: Any) -> Any:
    class SmallReadProtocol(base):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)
            if hasattr(transport, "max_size"):  # asyncio's selector transports
                transport.max_size = READ_BYTES

        def on_response_complete(self) -> None:
            # Answered (often 503 before the body was read): its buffered body is dead.
            cycle = getattr(self, "cycle", None)
            if cycle is not None and cycle.response_complete:
                cycle.body = bytearray()
            super().on_response_complete()

    return SmallReadProtocol
