"""Live minute table: dirty-minute queue written by ingest, live rows kept by analytics.

- ``live_dirty``: every ingest commit appends, per run, which end-time minutes its attempts
  touched and from which minute their slot/queue intervals began; the analytics worker
  drains it (docs/metrics.md#live-figures).
- ``live_minutes``: the minute table of runs with data newer than their latest snapshot,
  recomputed minute by minute, plus what run-level figures need to be summed exactly.
- ``runs.max_slot_ns``: the longest queued-to-released interval of the run, so the worker
  can find every attempt overlapping a minute through the (run_id, end_ns) index.
- ``snapshots.final``: false for a snapshot sealed while its run was still receiving data.
- ``snapshots.leaf_hashes``: the version's minute leaf hashes (32 bytes each, in minute
  order), so a consistency proof between two versions needs no recomputation.
- ``attempts.ingest_batch``: the ingest commit that stored the row (a sequence value the
  writer sets per transaction), recorded with the commit's marks too, so the worker reads
  only new rows of a minute it holds already; ``live_state`` counts each run's updates
  so a worker knows no other one drained marks in between.
- Two partial indexes the live path probes: children by parent (rollups), attempts by
  explicit call id (position of an attempt without a resend count within its call).

Revision ID: 0003
Revises: 0002
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

# The writer sets tpmledger.ingest_batch per transaction (storage/writers/bulk_writer.py).
INGEST_BATCH_DEFAULT = "NULLIF(current_setting('tpmledger.ingest_batch', true), '')::bigint"

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "live_dirty",
        sa.Column("id", sa.BigInteger(), sa.Identity(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("end_minute_ns", sa.BigInteger(), nullable=False),
        sa.Column("from_minute_ns", sa.BigInteger(), nullable=False),
        sa.Column("batch_id", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_live_dirty")),
    )
    op.create_table(
        "live_state",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("generation", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_live_state")),
    )
    op.execute("CREATE SEQUENCE ingest_batches")
    # Added without a default, then given one: existing rows stay NULL (no table rewrite).
    op.add_column("attempts", sa.Column("ingest_batch", sa.BigInteger(), nullable=True))
    op.alter_column("attempts", "ingest_batch", server_default=sa.text(INGEST_BATCH_DEFAULT))
    # Rows are appended in commit order, so a block-range index finds a commit's rows by
    # reading only their pages, at next to no cost per insert.
    op.create_index(
        "ix_attempts_ingest_batch",
        "attempts",
        ["ingest_batch"],
        postgresql_using="brin",
        postgresql_with={"pages_per_range": 16, "autosummarize": "on"},
    )
    op.create_table(
        "live_minutes",
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("shard_id", sa.Text(), nullable=False),
        sa.Column("minute_utc", sa.DateTime(timezone=True), nullable=False),
        sa.Column("calls_in_minute", sa.BigInteger(), nullable=False),
        sa.Column("prompt_tpm_in", sa.BigInteger(), nullable=False),
        sa.Column("completion_tpm_out", sa.BigInteger(), nullable=False),
        sa.Column("tpm_total", sa.BigInteger(), nullable=False),
        sa.Column("successes", sa.BigInteger(), nullable=False),
        sa.Column("failures", sa.BigInteger(), nullable=False),
        sa.Column("retries", sa.BigInteger(), nullable=True),
        sa.Column("retry_rate", sa.Double(), nullable=True),
        sa.Column("success_rate", sa.Double(), nullable=True),
        sa.Column("ttft_p50_s", sa.Double(), nullable=True),
        sa.Column("ttft_p95_s", sa.Double(), nullable=True),
        sa.Column("ttft_p99_s", sa.Double(), nullable=True),
        sa.Column("ttft_mean_s", sa.Double(), nullable=True),
        sa.Column("ttft_variance_s2", sa.Double(), nullable=True),
        sa.Column("latency_p50_s", sa.Double(), nullable=True),
        sa.Column("latency_p95_s", sa.Double(), nullable=True),
        sa.Column("latency_p99_s", sa.Double(), nullable=True),
        sa.Column("in_flight_mean", sa.Double(), nullable=True),
        sa.Column("in_flight_max", sa.Integer(), nullable=True),
        sa.Column("queue_depth_mean", sa.Double(), nullable=True),
        sa.Column("queue_depth_max", sa.Integer(), nullable=True),
        sa.Column("concurrency_cap", sa.Integer(), nullable=True),
        sa.Column("shards_active", sa.Integer(), nullable=False),
        sa.Column("queue_reports", sa.BigInteger(), nullable=False),
        sa.Column("retry_evidence", sa.Boolean(), nullable=False),
        sa.Column("queue_seconds", sa.BigInteger(), nullable=False),
        sa.Column("sag_seconds", sa.BigInteger(), nullable=False),
        sa.Column("sag_cap", sa.Integer(), nullable=True),
        sa.Column("data_as_of", sa.DateTime(timezone=True), nullable=False),
        sa.Column("computed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "minute_utc", "shard_id", name=op.f("pk_live_minutes")),
    )
    op.add_column("runs", sa.Column("max_slot_ns", sa.BigInteger(), nullable=True))
    op.add_column(
        "snapshots",
        sa.Column("final", sa.Boolean(), server_default=sa.text("true"), nullable=False),
    )
    op.add_column("snapshots", sa.Column("leaf_hashes", sa.LargeBinary(), nullable=True))
    # Runs stored before this revision: their longest interval, once.
    op.execute(
        """
        UPDATE runs r SET max_slot_ns = (
            SELECT max(a.end_ns - a.start_ns
                       + coalesce(round(least(greatest(a.queue_wait_s, 0), 3e9) * 1e9)::bigint, 0))
            FROM attempts a WHERE a.run_id = r.run_id)
        """
    )
    op.create_index(
        "ix_attempts_trace_id_parent_span_id",
        "attempts",
        ["trace_id", "parent_span_id"],
        postgresql_where=sa.text("parent_span_id IS NOT NULL"),
    )
    op.create_index(
        "ix_attempts_run_id_call_id",
        "attempts",
        ["run_id", "call_id"],
        postgresql_where=sa.text("call_id_explicit"),
    )


def downgrade() -> None:
    op.drop_index("ix_attempts_run_id_call_id", table_name="attempts")
    op.drop_index("ix_attempts_trace_id_parent_span_id", table_name="attempts")
    op.drop_column("snapshots", "leaf_hashes")
    op.drop_column("snapshots", "final")
    op.drop_column("runs", "max_slot_ns")
    op.drop_index("ix_attempts_ingest_batch", table_name="attempts")
    op.drop_column("attempts", "ingest_batch")
    op.execute("DROP SEQUENCE ingest_batches")
    op.drop_table("live_state")
    op.drop_table("live_minutes")
    op.drop_table("live_dirty")
