"""Minute leaves stored with each sealed version, so entry bundles are served from them.

- ``minute_leaves``: the RFC 8785 bytes of a version's minute leaves (docs/provenance.md
  #tiles), stored as the minute rows are: only where a minute's leaf differs from what the
  versions before hold, and only for minutes with attempts (an empty minute's leaf is
  determined by its minute). Keyed (run, minute, version) so one tile's 256 minutes are
  one index range.
- ``snapshots.leaves_stored``: true for versions sealed with their leaves stored; versions
  sealed before this revision serve hash tiles but not entry bundles until sealed again.

Revision ID: 0008
Revises: 0007
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "minute_leaves",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("minute_utc", sa.DateTime(timezone=True), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("leaf", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "minute_utc", "version", name=op.f("pk_minute_leaves")),
    )
    op.add_column(
        "snapshots",
        sa.Column("leaves_stored", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("snapshots", "leaves_stored")
    op.drop_table("minute_leaves")
