"""The serving side's own metrics (docs/metrics.md#serving-side-metrics).

- ``server_metric_minutes``: per server instance, engine (``vllm`` / ``sglang``), model,
  explicit run (``''`` when the metrics carry no ``tpmledger.run.id``) and UTC minute —
  the sum, count and maximum of each gauge (running, waiting, KV-cache use, generation
  throughput) and the increase of each counter (preemptions, prompt and generation tokens,
  queue time and TTFT sums and counts; NULL until a counter has a baseline).
- ``server_metric_streams``: the last value of each counter series, so the next reading
  adds only its increase (a lower value or a new start time is a reset).

Revision ID: 0019
Revises: 0012
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_GAUGES = ("running", "waiting", "kv_cache", "gen_throughput")
_COUNTERS = (
    "preemptions", "prompt_tokens", "generation_tokens", "queue_time_s", "queue_count",
    "ttft_s", "ttft_count",
)  # fmt: skip


def upgrade() -> None:
    gauges = [
        column
        for name in _GAUGES
        for column in (
            sa.Column(f"{name}_sum", sa.Double(), nullable=False, server_default="0"),
            sa.Column(f"{name}_count", sa.Integer(), nullable=False, server_default="0"),
            sa.Column(f"{name}_max", sa.Double(), nullable=True),
        )
    ]
    counters: list[sa.Column[float]] = [
        sa.Column(name, sa.Double(), nullable=True) for name in _COUNTERS
    ]
    op.create_table(
        "server_metric_minutes",
        sa.Column("instance", sa.Text(), nullable=False),
        sa.Column("engine", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("run_id", sa.Text(), nullable=False),
        sa.Column("minute_utc", sa.DateTime(timezone=True), nullable=False),
        *gauges,
        *counters,
        sa.PrimaryKeyConstraint(
            "instance",
            "engine",
            "model",
            "run_id",
            "minute_utc",
            name=op.f("pk_server_metric_minutes"),
        ),
    )
    op.create_index(
        "ix_server_metric_minutes_model_minute",
        "server_metric_minutes",
        ["model", "minute_utc"],
    )
    # /metrics reads every server's newest minutes: a range scan, whatever the model.
    op.create_index("ix_server_metric_minutes_minute_utc", "server_metric_minutes", ["minute_utc"])
    op.create_index(
        "ix_server_metric_minutes_run_minute",
        "server_metric_minutes",
        ["run_id", "minute_utc"],
        postgresql_where=sa.text("run_id <> ''"),
    )
    op.create_table(
        "server_metric_streams",
        sa.Column("stream", sa.Text(), nullable=False),
        sa.Column("start_ns", sa.BigInteger(), nullable=False),
        sa.Column("value", sa.Double(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("stream", name=op.f("pk_server_metric_streams")),
    )


def downgrade() -> None:
    op.drop_table("server_metric_streams")
    op.drop_index("ix_server_metric_minutes_run_minute", table_name="server_metric_minutes")
    op.drop_index("ix_server_metric_minutes_model_minute", table_name="server_metric_minutes")
    op.drop_index("ix_server_metric_minutes_minute_utc", table_name="server_metric_minutes")
    op.drop_table("server_metric_minutes")
