"""Provider quota headroom: the rate-limit state each attempt span reported.

Declared quotas (``tpmledger.quota.tpm`` / ``.rpm``), the captured rate-limit response
headers and how many of those values could not be read (docs/metrics.md#quota-headroom).
Rows stored before this revision keep NULL in every new column.

Revision ID: 0011
Revises: 0010
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_NUMBERS = (
    "quota_tpm_declared",
    "quota_rpm_declared",
    "ratelimit_limit_tokens",
    "ratelimit_limit_requests",
    "ratelimit_remaining_tokens",
    "ratelimit_remaining_requests",
    "retry_after_s",
)


def upgrade() -> None:
    # Nullable columns without defaults: PostgreSQL adds them without rewriting the table.
    for name in _NUMBERS:
        op.add_column("attempts", sa.Column(name, sa.Double(), nullable=True))
    op.add_column("attempts", sa.Column("quota_values_ignored", sa.SmallInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("attempts", "quota_values_ignored")
    for name in reversed(_NUMBERS):
        op.drop_column("attempts", name)
