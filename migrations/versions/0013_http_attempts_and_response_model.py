"""HTTP client attempts and the response model (docs/conventions.md#attempts).

- ``attempts.response_model``: the model the response named; ``model`` is now the model
  the request asked for (one deployment, one target). Rows stored before this revision
  keep NULL.
- HTTP client spans of an LLM call are stored as attempts (``convention = 'http'``); a
  partial index finds a run's (usually none: a run without them pays nothing) and a
  call's siblings (run, trace, parent), which every figure's read probes per attempt.

Revision ID: 0013
Revises: 0012
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable without a default: added without rewriting the table.
    op.add_column("attempts", sa.Column("response_model", sa.Text(), nullable=True))
    op.create_index(
        "ix_attempts_run_id_http",
        "attempts",
        ["run_id", "trace_id", "parent_span_id"],
        postgresql_where=sa.text("convention = 'http'"),
    )


def downgrade() -> None:
    op.drop_index("ix_attempts_run_id_http", table_name="attempts")
    op.drop_column("attempts", "response_model")
