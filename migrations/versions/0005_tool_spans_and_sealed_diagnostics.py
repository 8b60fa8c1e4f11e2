"""Tool spans, and the figures sealed with a version that need attempts (compare, pitfalls).

- ``tool_spans``: spans with ``gen_ai.operation.name`` = ``execute_tool``, kept apart from
  attempts (never counted as one), so slot holding by tools can be measured within a trace.
- ``snapshot_diagnostics``: per sealed version, the run's diagnostics (retry storm,
  deadline overrun, slot held by tool, per-target saturation) and the per-minute stalls and
  logical-call outcomes that ``tpmledger compare`` resamples.
- ``snapshot_goodput``: per sealed version and SLO, goodput per minute and per run.

Revision ID: 0005
Revises: 0003
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tool_spans",
        sa.Column("trace_id", sa.LargeBinary(), nullable=False),
        sa.Column("span_id", sa.LargeBinary(), nullable=False),
        sa.Column("parent_span_id", sa.LargeBinary(), nullable=True),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("shard_id", sa.Text(), nullable=False),
        sa.Column("start_ns", sa.BigInteger(), nullable=False),
        sa.Column("end_ns", sa.BigInteger(), nullable=False),
        sa.Column("tool_name", sa.Text(), nullable=True),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column(
            "received_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("trace_id", "span_id", name=op.f("pk_tool_spans")),
    )
    op.create_index(
        "ix_tool_spans_run_id_start_ns", "tool_spans", ["run_id", "start_ns"], unique=False
    )
    op.create_table(
        "snapshot_diagnostics",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("diagnostics", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("minute_outcomes", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("params", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id", "version"],
            ["snapshots.run_id", "snapshots.version"],
            name=op.f("fk_snapshot_diagnostics_run_id_snapshots"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "version", name=op.f("pk_snapshot_diagnostics")),
    )
    op.create_table(
        "snapshot_goodput",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("slo", sa.Text(), nullable=False),
        sa.Column("figures", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id", "version"],
            ["snapshots.run_id", "snapshots.version"],
            name=op.f("fk_snapshot_goodput_run_id_snapshots"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "version", "slo", name=op.f("pk_snapshot_goodput")),
    )


def downgrade() -> None:
    op.drop_table("snapshot_goodput")
    op.drop_table("snapshot_diagnostics")
    op.drop_index("ix_tool_spans_run_id_start_ns", table_name="tool_spans")
    op.drop_table("tool_spans")
