"""Per-minute facts of live runs that make every run figure live.

- ``live_run_minutes``: per run and minute (the whole run only), what run-level figures
  need beyond the minute table: logical calls whose last attempt ends in the minute and
  how many of them succeeded, the retry causes of the minute's failed attempts that a
  later attempt retried, and per value (TTFT, latency) the count, sum and sum of squared
  deviations (exact mean and variance) plus a DDSketch of relative accuracy 1 %
  (docs/metrics.md#live-approximations), and per shard the work-conserving check's
  seconds with a queue, those that sagged, and the cap they were counted against; the
  deadline overrun's sums and the largest request timeout declared in the minute.
  Unlike ``live_minutes`` these rows are not dropped when a checkpoint seals the minute:
  the run's live figures merge every minute.

Revision ID: 0009
Revises: 0008
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "live_run_minutes",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("minute_utc", sa.DateTime(timezone=True), nullable=False),
        sa.Column("attempts", sa.BigInteger(), nullable=False),
        sa.Column("explicit_calls", sa.BigInteger(), nullable=False),
        sa.Column("logical_calls", sa.BigInteger(), nullable=False),
        sa.Column("call_successes", sa.BigInteger(), nullable=False),
        sa.Column("retry_causes", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("ttft", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("latency", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("work_seconds", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("max_timeout_s", sa.Double(), nullable=True),
        sa.Column("deadline", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("data_as_of", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "minute_utc", name=op.f("pk_live_run_minutes")),
    )


def downgrade() -> None:
    op.drop_table("live_run_minutes")
