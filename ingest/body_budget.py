"""A bound on request bodies held in memory before and while they wait for their commit.

The group-commit queue bounds the *rows* waiting to be written, but a request holds its
body from the moment its headers arrive until its answer is sent: with hundreds of
concurrent senders those bodies, not the queue, decide the memory of the process
(measured with ``bench/ingest_overload.py``: 480 senders of 512-span batches took ingest
to 450-660 MiB with the queue far from full). SPEC §7 wants RSS ≤ 300 MB under overload,
and SPEC §3 says overload is a 503 with Retry-After, so a request whose declared body
would take the bodies in flight past the budget is refused before anything is read.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from ingest.error_taxonomy import Overloaded

# 16 MiB ≈ 55 requests of 512 spans (~28k spans, over a second of work at full speed):
# plenty for steady load, and each admitted request also holds its COPY block (~1.3 × its
# body) until the commit, so this bound is what keeps overload under SPEC §7's 300 MB.
DEFAULT_MAX_BYTES: Final = 16 * 1024 * 1024
# A body without Content-Length (chunked) is charged this much until it is read.
UNDECLARED_BYTES: Final = 1024 * 1024


class BodyBudget:
    """Bytes of request bodies currently admitted; refuses past ``max_bytes`` (503)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES, *, retry_after_s: int = 2) -> None:
        self.max_bytes = max_bytes
        self.retry_after_s = retry_after_s
        self.in_use = 0

    @contextmanager
    def hold(self, content_length: str | None) -> Iterator[None]:
        """Admit one body for the duration of the block, or raise :class:`Overloaded`.

        A single body larger than the budget is still admitted when nothing else is in
        flight, otherwise it could never be stored (the 16 MiB limit bounds it).
        """
        size = int(content_length) if content_length and content_length.isdigit() else 0
        size = size or UNDECLARED_BYTES
        if self.in_use and self.in_use + size > self.max_bytes:
            raise Overloaded(
                f"{self.in_use} bytes of request bodies in flight; retry later",
                retry_after_s=self.retry_after_s,
            )
        self.in_use += size
        try:
            yield
        finally:
            self.in_use -= size
