"""GenAI token-usage metrics, and retention.

- ``genai_metric_tokens``: tokens counted by GenAI token-usage metrics per run, shard,
  minute and token type, summed over exports (docs/metrics.md#reconciliation).
- ``genai_metric_streams``: the last value of each cumulative metric stream, so a
  re-export adds only the difference.
- ``runs.archived_at`` / ``runs.archive_dir``: set when ``tpmledger prune`` archived a run
  and deleted its raw spans (docs/configuration.md#retention).

Revision ID: 0006
Revises: 0005
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("runs", sa.Column("archive_dir", sa.Text(), nullable=True))
    op.create_table(
        "genai_metric_tokens",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("shard_id", sa.Text(), nullable=False),
        sa.Column("minute_utc", sa.DateTime(timezone=True), nullable=False),
        sa.Column("token_type", sa.Text(), nullable=False),
        sa.Column("tokens", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint(
            "run_id", "shard_id", "minute_utc", "token_type", name=op.f("pk_genai_metric_tokens")
        ),
    )
    op.create_table(
        "genai_metric_streams",
        sa.Column("stream", sa.Text(), nullable=False),
        sa.Column("start_ns", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("stream", name=op.f("pk_genai_metric_streams")),
    )


def downgrade() -> None:
    op.drop_column("runs", "archive_dir")
    op.drop_column("runs", "archived_at")
    op.drop_table("genai_metric_streams")
    op.drop_table("genai_metric_tokens")
