"""Live tool-held slots and target saturation (docs/metrics.md#diagnostics).

- ``live_run_minutes.tools``: the minute's tool-held sums (attempts ending in it) and
  its tool spans; ``live_run_minutes.targets``: per (provider, model) target, the
  in-flight seconds of the minute by level, the bounds of its attempts ending in it and
  the cap they declared. NULL in rows written before this revision (the figures are not
  measured until the minute is recomputed).
- ``tool_spans.ingest_batch``: the ingest commit that stored the tool span, as
  ``attempts.ingest_batch`` (a late tool span changes the held time of attempts already
  counted), with a block-range index to find a commit's tool spans.

Revision ID: 0012
Revises: 0011
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INGEST_BATCH_DEFAULT = "NULLIF(current_setting('tpmledger.ingest_batch', true), '')::bigint"


def upgrade() -> None:
    op.add_column("live_run_minutes", sa.Column("tools", postgresql.JSONB(), nullable=True))
    op.add_column("live_run_minutes", sa.Column("targets", postgresql.JSONB(), nullable=True))
    # Added without a default, then given one: existing rows stay NULL (no table rewrite).
    op.add_column("tool_spans", sa.Column("ingest_batch", sa.BigInteger(), nullable=True))
    op.alter_column("tool_spans", "ingest_batch", server_default=sa.text(INGEST_BATCH_DEFAULT))
    op.create_index(
        "ix_tool_spans_ingest_batch",
        "tool_spans",
        ["ingest_batch"],
        postgresql_using="brin",
        postgresql_with={"pages_per_range": 16, "autosummarize": "on"},
    )


def downgrade() -> None:
    op.drop_index("ix_tool_spans_ingest_batch", table_name="tool_spans")
    op.drop_column("tool_spans", "ingest_batch")
    op.drop_column("live_run_minutes", "targets")
    op.drop_column("live_run_minutes", "tools")
