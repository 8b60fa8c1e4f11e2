"""Store attempt rows for analytics tests through the real bulk write path."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tpmledger.storage.bulk_writer import write_attempts
from tpmledger.storage.database import raw_transaction


def store(url: str, rows: Iterable[Sequence[Any]]) -> int:
    """Write attempt tuples (ATTEMPT_COPY_COLUMNS order) as ingest would; returns new rows."""
    with raw_transaction(url) as conn:
        return write_attempts(conn, list(rows))
