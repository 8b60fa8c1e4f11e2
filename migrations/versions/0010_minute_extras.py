"""Per-minute extras: cache and reasoning tokens, failed attempts by error type.

- ``minute_extras``: what ``/metrics`` counts beyond the minute table
  (docs/operations.md#per-run-series), kept by the live updater for every minute new
  attempts touch. Minutes stored before this migration have no rows (not measured).

Revision ID: 0010
Revises: 0009
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "minute_extras",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("minute_utc", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "run_id", "minute_utc", "kind", "key", name=op.f("pk_minute_extras")
        ),
    )


def downgrade() -> None:
    op.drop_table("minute_extras")
