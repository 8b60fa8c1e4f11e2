"""Minute leaf bytes of sealed versions, each stored once (docs/provenance.md#tiles).

Like the minute rows (storage/writers/minute_versions.py), a version stores only the leaves that
differ from what the versions before it hold; the leaves **of version V** are, per
minute, the newest row stored at a version <= V. Minutes without attempts are not stored
unless a row before them says otherwise: their leaf is determined by the minute
(analytics/seal/stored_leaves.py). Reads are bounded to a range of minutes, so serving one
entry bundle reads at most its 256 minutes' rows, whatever the run's size.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import psycopg
from psycopg import sql
from sqlalchemy import text
from sqlalchemy.orm import Session

from tpmledger.storage.schema.models import MinuteLeaf


def leaves_as_of(
    session: Session, run_id: str, version: int, start: datetime, end: datetime
) -> dict[datetime, bytes]:
    """The stored leaf of every minute in ``[start, end)`` as version ``version`` sees it
    (the newest row at a version <= ``version``); minutes without a row are absent."""
    rows = session.execute(
        text(
            "SELECT DISTINCT ON (minute_utc) minute_utc, leaf FROM minute_leaves "
            "WHERE run_id = :run AND minute_utc >= :start AND minute_utc < :end "
            "AND version <= :version ORDER BY minute_utc, version DESC"
        ),
        {"run": run_id, "start": start, "end": end, "version": version},
    )
    return {minute: bytes(leaf) for minute, leaf in rows}


def insert_minute_leaves(
    session: Session, run_id: str, version: int, leaves: Sequence[tuple[datetime, bytes]]
) -> int:
    """Store ``(minute_utc, leaf bytes)`` rows of ``version`` with one ``COPY`` on the
    session's connection and transaction; returns how many were stored."""
    if not leaves:
        return 0
    columns = [column.name for column in MinuteLeaf.__table__.columns]
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(MinuteLeaf.__tablename__),
        sql.SQL(", ").join(sql.Identifier(name) for name in columns),
    )
    values = {"run_id": run_id, "version": version}
    driver = session.connection().connection.driver_connection
    if not isinstance(driver, psycopg.Connection):
        raise TypeError("minute leaves are copied over psycopg (3) connections only")
    with driver.cursor() as cursor, cursor.copy(statement) as copy:
        for minute, leaf in leaves:
            row = {**values, "minute_utc": minute, "leaf": leaf}
            copy.write_row([row[name] for name in columns])
    return len(leaves)
