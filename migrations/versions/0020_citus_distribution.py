"""Distributed PostgreSQL: on a Citus coordinator, distribute the per-run tables by
``run_id`` (colocated with ``attempts``) and make the small global tables reference
tables (docs/operations.md#scaling-out). The table roles live in
:mod:`tpmledger.storage.server.distribution`.

On a database without the ``citus`` extension (single-node PostgreSQL) this revision
changes nothing. ``tpmledger migrate --distributed`` creates the extension first, so a
coordinator whose database lacks it is distributed too.

Revision ID: 0020
Revises: 0012
"""

from collections.abc import Sequence

from alembic import op

from tpmledger.storage.server.distribution import distribute_tables, is_citus, undistribute_tables

revision: str = "0020"
down_revision: str | Sequence[str] | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    conn = op.get_bind()
    if is_citus(conn):
        distribute_tables(conn)


def downgrade() -> None:
    conn = op.get_bind()
    if is_citus(conn):
        undistribute_tables(conn)
