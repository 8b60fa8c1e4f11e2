"""Store attempt rows for analytics tests through the real bulk write path."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tpmledger.storage.server.database import raw_transaction
from tpmledger.storage.writers.bulk_writer import write_attempts


def store(url: str, rows: Iterable[Sequence[Any]]) -> int:
    """Write attempt tuples (ATTEMPT_COPY_COLUMNS order) as ingest would; returns new rows."""
    with raw_transaction(url) as conn:
        return write_attempts(conn, list(rows))
