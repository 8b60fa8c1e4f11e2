"""Store the raw span and resource attributes as ``json`` instead of ``jsonb``.

The attributes are kept verbatim for audit and later re-normalization; no query reads
inside them. ``jsonb`` parses and re-encodes every document on input, which was the
largest share of PostgreSQL's CPU per ingested span (bench/ingest.py: about 24 µs per
row with ``jsonb``, 17 µs with ``json``, which only validates the text). Operators that
want to query attributes can still use ``->``/``->>`` on ``json`` or add an expression
index.

Revision ID: 0003
Revises: 0002
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ("span_attributes", "resource_attributes")


def _retype(kind: str) -> None:
    changes = ", ".join(f"ALTER {column} TYPE {kind} USING {column}::{kind}" for column in _COLUMNS)
    op.execute(f"ALTER TABLE attempts {changes}")


def upgrade() -> None:
    _retype("json")


def downgrade() -> None:
    _retype("jsonb")
