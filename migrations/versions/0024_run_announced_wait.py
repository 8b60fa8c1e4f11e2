"""``runs.wait_until_ns``: the latest moment (event clock) until which a stored attempt's
``Retry-After`` told its client to wait. The analytics worker's quiet period starts after
it, so a fleet that waits out a quota window is not sealed final meanwhile
(docs/provenance.md#versions).

Revision ID: 0024
Revises: 0020
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | Sequence[str] | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("wait_until_ns", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "wait_until_ns")
