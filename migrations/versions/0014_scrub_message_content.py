"""Scrub message content from attempts stored before ingest dropped it
(docs/configuration.md#message-content).

Ingest now leaves prompts, completions, tool arguments and message lists out of
``attempts.span_attributes`` and ``attempts.resource_attributes``; this revision removes
the same keys (ingest/content_filter.py's ``CONTENT_KEY_PATTERN``) from the rows stored
before it. No other table ever held attribute values. Nothing tpmledger computes reads
those keys, so no figure changes.

Downgrade is a no-op: the removed values are gone and are not restored. A database that
must keep content for debugging (``TPMLEDGER_STORE_CONTENT=true``) keeps what is stored
*after* this revision; run it before turning that setting on.

Revision ID: 0014
Revises: 0012
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from tpmledger.ingest.content_filter import CONTENT_KEY_PATTERN

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _kept(column: str) -> str:
    return (
        f"(SELECT coalesce(jsonb_object_agg(key, value), '{{}}'::jsonb) "
        f"FROM jsonb_each({column}) WHERE key !~ :pattern)"
    )


def _has_content(column: str) -> str:
    return f"EXISTS (SELECT 1 FROM jsonb_object_keys({column}) AS key WHERE key ~ :pattern)"


def upgrade() -> None:
    # One pass over the table; only rows that hold a content key are rewritten.
    op.get_bind().execute(
        sa.text(
            f"UPDATE attempts SET span_attributes = {_kept('span_attributes')}, "
            f"resource_attributes = {_kept('resource_attributes')} "
            f"WHERE {_has_content('span_attributes')} OR {_has_content('resource_attributes')}"
        ),
        {"pattern": CONTENT_KEY_PATTERN},
    )


def downgrade() -> None:
    # Scrubbed content cannot be restored: nothing to undo.
    pass
