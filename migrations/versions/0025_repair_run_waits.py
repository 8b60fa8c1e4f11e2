"""Repair ``runs.max_slot_ns`` and ``runs.wait_until_ns`` written by the staging path.

A batch holding a re-sent span is stored through a staging table, whose SQL derived each
attempt's interval and announced wait with ``LEAST(value, 3e9)``. PostgreSQL's LEAST skips
NULLs, so an attempt with no queue wait or no ``Retry-After`` counted as waiting 3e9 s: its
run looked ``Retry-After``-bound (the worker held its final seal back for the 300 s cap, see
docs/provenance.md#versions) and the live path re-read the run's whole tail on every update.
Runs carrying the 3e9 s value are recomputed from their attempts, with the rule the writers
use now (a wait counts only when positive; at most 3e9 s).

Revision ID: 0025
Revises: 0024
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0025"
down_revision: str | Sequence[str] | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: 3e9 s in nanoseconds: no real interval or Retry-After reaches it, the bug always did.
_CAP_NS = 3 * 10**18


def upgrade() -> None:
    # UPDATE … FROM a subquery grouped by run_id, joined on run_id: one statement that a
    # Citus coordinator pushes down to each worker (both tables are distributed by run_id).
    op.execute(
        f"""
        UPDATE runs r
        SET max_slot_ns = fixed.max_slot_ns, wait_until_ns = fixed.wait_until_ns
        FROM (
            SELECT a.run_id,
                   max(a.end_ns - a.start_ns
                       + CASE WHEN a.queue_wait_s > 0
                              THEN round(least(a.queue_wait_s, 3e9) * 1e9)::bigint
                              ELSE 0 END) AS max_slot_ns,
                   max(CASE WHEN a.retry_after_s > 0
                            THEN a.end_ns + round(least(a.retry_after_s, 3e9) * 1e9)::bigint
                       END) AS wait_until_ns
            FROM attempts a
            JOIN runs b ON b.run_id = a.run_id
            WHERE b.max_slot_ns >= {_CAP_NS} OR b.wait_until_ns - b.first_event_ns >= {_CAP_NS}
            GROUP BY a.run_id
        ) fixed
        WHERE r.run_id = fixed.run_id
        """
    )


def downgrade() -> None:
    """Nothing to undo: the repaired values are the ones the writers store."""
