"""Which attempts a seal sees, as a SQL condition: light (no Polars), so readers that
share the seal's scope, such as the per-target reads the ingest process serves
(docs/metrics.md#quota-headroom), load nothing of the seal's machinery."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg import sql


@dataclass(frozen=True)
class SealScope:
    """The attempts a seal sees: those that ended before ``end_before_ns`` (a checkpoint)
    and were stored by ``received_by`` (a rebuilt version), when given."""

    end_before_ns: int | None = None
    received_by: datetime | None = None

    def on(self, table: str | None = None) -> sql.Composable:
        """The scope as a condition on the attempts table (aliased ``table``)."""
        parts: list[sql.Composable] = [sql.SQL("TRUE")]
        column = (lambda name: sql.Identifier(table, name)) if table else sql.Identifier
        if self.end_before_ns is not None:
            parts.append(
                sql.SQL("{} < {}").format(column("end_ns"), sql.Literal(int(self.end_before_ns)))
            )
        if self.received_by is not None:
            parts.append(
                sql.SQL("{} <= {}").format(column("received_at"), sql.Literal(self.received_by))
            )
        return sql.SQL(" AND ").join(parts)
