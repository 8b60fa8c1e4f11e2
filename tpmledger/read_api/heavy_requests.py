"""A cap on whole-run read requests served at once (docs/ingest.md#limits).

Streaming a run's ``events.jsonl`` holds a database snapshot and a chunk of the run for as
long as the download lasts, in a writer process of its own (~285 MiB: the file's libraries
and a chunk, :mod:`tpmledger.analytics.proofs.event_file_process`); the read API shares the
machine with ingest, so the number of such requests in flight is bounded
(``TPMLEDGER_HEAVY_REQUESTS``, default 2).
Past it, the answer is 503 with ``Retry-After``, like an overloaded ingest.
"""

from __future__ import annotations

from fastapi import HTTPException


class HeavyRequests:
    """Slots for heavy requests in one process (one event loop: no lock needed)."""

    def __init__(self, limit: int, retry_after_s: int = 2) -> None:
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.in_use = 0

    def take(self) -> HeavySlot:
        """A slot, or 503 + Retry-After when every slot is taken."""
        if self.in_use >= self.limit:
            raise HTTPException(
                503,
                detail=f"{self.in_use} whole-run downloads in progress "
                "(TPMLEDGER_HEAVY_REQUESTS); retry later",
                headers={"Retry-After": str(self.retry_after_s)},
            )
        self.in_use += 1
        return HeavySlot(self)


class HeavySlot:
    """One taken slot; :meth:`release` is idempotent."""

    def __init__(self, owner: HeavyRequests) -> None:
        self._owner: HeavyRequests | None = owner

    def release(self) -> None:
        if self._owner is not None:
            self._owner.in_use -= 1
            self._owner = None
