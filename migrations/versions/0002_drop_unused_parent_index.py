"""Drop the (trace_id, parent_span_id) index: rollups are resolved per run in Polars.

No query reads attempts by parent: analytics loads a run through ix_attempts_run_id_end_ns
and resolves rollups in memory, so this index only cost time on every ingest COPY.

Revision ID: 0002
Revises: 0001
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index("ix_attempts_trace_id_parent", table_name="attempts")


def downgrade() -> None:
    op.create_index(
        "ix_attempts_trace_id_parent", "attempts", ["trace_id", "parent_span_id"], unique=False
    )
