"""Retention: what pruning a run's raw spans needs (filled in by the retention work).

Revision ID: 0006
Revises: 0005
"""

from collections.abc import Sequence

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
