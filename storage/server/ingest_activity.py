"""Whether ingest is writing right now, as PostgreSQL sees it: the live loop yields to a
saturated ingest (docs/metrics.md#live-figures).

Ingest's group-commit connections name themselves :data:`INGEST_WRITER` in
``pg_stat_activity``; a backend of that name running a statement or inside a transaction
is inside a commit (ingest's other connections carry the name too, for short reads).
Sampled a few times, the share of samples that find one says how busy ingest's writer is:
a saturated ingest commits back to back. The server shows another user's sessions only to
a superuser or a member of ``pg_read_all_stats``; when the services connect as different
users the samples find nothing and nothing yields.
"""

from __future__ import annotations

import psycopg

__all__ = ["INGEST_WRITER", "ingest_writing"]

#: ``application_name`` of ingest's group-commit connections (the ingest service's other
#: connections carry it too, through ``PGAPPNAME``).
INGEST_WRITER = "tpmledger-ingest"

_WRITING = """
SELECT count(*) FROM pg_stat_activity
WHERE application_name = %s AND state IN ('active', 'idle in transaction')
  AND pid <> pg_backend_pid()"""


def ingest_writing(conn: psycopg.Connection) -> bool:
    """Whether an ingest connection is inside a commit now. ``conn`` must be in autocommit
    mode: the server keeps one view of ``pg_stat_activity`` per transaction."""
    row = conn.execute(_WRITING, (INGEST_WRITER,)).fetchone()
    return bool(row and row[0])
