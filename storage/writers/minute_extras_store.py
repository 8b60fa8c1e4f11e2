"""Writes of the per-minute extras (``minute_extras``, docs/operations.md#per-run-series):
cache and reasoning token sums and failed attempts by error type, which the minute table
does not keep. The live updater replaces a touched minute's extras in its transaction."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import psycopg


def replace_extras(
    conn: psycopg.Connection,
    run_id: str,
    minute_starts: Sequence[datetime],
    rows: Sequence[tuple[datetime, str, str, int]],
) -> None:
    """Replace the extras of ``minute_starts`` with ``rows`` (minute, kind, key, value)."""
    conn.execute(
        "DELETE FROM minute_extras WHERE run_id = %s AND minute_utc = ANY(%s)",
        (run_id, list(minute_starts)),
    )
    if not rows:
        return
    with (
        conn.cursor() as cursor,
        cursor.copy("COPY minute_extras (run_id, minute_utc, kind, key, value) FROM STDIN") as copy,
    ):
        for minute, kind, key, value in rows:
            copy.write_row((run_id, minute, kind, key, value))
