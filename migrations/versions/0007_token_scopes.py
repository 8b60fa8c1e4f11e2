"""Token scopes: ``ingest_tokens.scope`` is ``ingest``, ``read`` or ``all``.

Tokens that exist when this runs were created before scopes and keep both (``all``);
``tpmledger tokens create`` names the scope of every new one (docs/ingest.md#token-scopes).

Revision ID: 0007
Revises: 0006
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "ingest_tokens",
        sa.Column("scope", sa.Text(), nullable=False, server_default="all"),
    )
    op.alter_column("ingest_tokens", "scope", server_default=None)


def downgrade() -> None:
    op.drop_column("ingest_tokens", "scope")
