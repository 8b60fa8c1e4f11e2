"""The rows of new ingest commits as the live path folds them: with their flags, read
set-based in one statement (docs/metrics.md#live-figures).

An update folds the rows of the commits its marks name. Their flags (``rollup``,
``later_in_call``, ``has_later``: :mod:`storage.readers.live_window`) were probed row by
row after the read: a primary-key lookup to find each row again, then lookups of its
children and of its call's attempts, three times over. Here they come with the read:
the commits' rows through the block-range index on ``ingest_batch``, each explicit call's
attempts through one index lookup per call (not per row), and per call its earliest and
its latest attempt that is not a rollup. An attempt has an earlier attempt in its call
(``later_in_call``) when the call's earliest comes before it, and a later one
(``has_later``) when the call's latest comes after it: the same flags the per-row probes
give. :func:`dependents_of_commits` starts from the same rows, without looking each up.
All of it runs on the caller's connection and transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl
import psycopg
from psycopg import sql

from tpmledger.storage.codecs.binary_copy import Kind
from tpmledger.storage.readers.attempt_frames import copy_select
from tpmledger.storage.readers.call_attempts import resolved_join
from tpmledger.storage.readers.live_window import (
    DEPENDENTS_SQL,
    LIVE_WINDOW_KINDS,
    Dependent,
    parse_dependents,
    select_list,
)

#: The flags each row comes with (0 or 1), after :data:`LIVE_WINDOW_KINDS` and ``run_id``.
FLAGS = ("rollup", "later_in_call", "has_later")
_KINDS: dict[str, Kind] = {**LIVE_WINDOW_KINDS, **dict.fromkeys(FLAGS, "integer")}

# The commits' rows are found through the block-range index (the materialized step keeps
# the planner from scanning the run's end-time range instead); the run is named inside too,
# so on Citus the statement runs on the run's one shard. ``arrival`` keeps the order the
# rows were stored in: they are folded in that order, as before.
_FLAGGED_SQL = f"""
WITH new AS MATERIALIZED (
    SELECT *, row_number() OVER () AS arrival FROM attempts
    WHERE run_id = {{run_id}} AND ingest_batch BETWEEN {{first}} AND {{last}}
      AND ingest_batch = ANY({{batches}}::bigint[])
), members AS MATERIALIZED (
    SELECT m.call_id, m.trace_id, m.span_id, m.start_ns, m.end_ns,
           EXISTS (SELECT 1 FROM attempts c WHERE c.trace_id = m.trace_id
                   AND c.parent_span_id = m.span_id AND c.run_id = {{run_id}}) AS rollup
    FROM (SELECT DISTINCT call_id FROM new WHERE call_id_explicit) n
    CROSS JOIN LATERAL (  -- one index lookup per call: every attempt of it in the run
        SELECT x.call_id, x.trace_id, x.span_id, x.start_ns, x.end_ns FROM attempts x
        WHERE x.run_id = {{run_id}} AND x.call_id_explicit AND x.call_id = n.call_id
        OFFSET 0
    ) m
), firsts AS (
    SELECT DISTINCT ON (call_id COLLATE "C") call_id, start_ns, end_ns, span_id
    FROM members
    WHERE NOT rollup ORDER BY call_id COLLATE "C", start_ns, end_ns, span_id
), lasts AS (
    SELECT DISTINCT ON (call_id COLLATE "C") call_id, start_ns, end_ns, span_id, trace_id
    FROM members
    WHERE NOT rollup
    ORDER BY call_id COLLATE "C", start_ns DESC, end_ns DESC, span_id DESC, trace_id DESC
)
SELECT {select_list("w")},
       (EXISTS (SELECT 1 FROM attempts c WHERE c.trace_id = w.trace_id
                AND c.parent_span_id = w.span_id AND c.run_id = {{run_id}}))::int,
       (w.resend_count IS NULL AND w.call_id_explicit AND coalesce(
            (f.start_ns, f.end_ns, f.span_id) < (w.start_ns, w.end_ns, w.span_id), false))::int,
       (w.call_id_explicit AND coalesce(
            (l.start_ns, l.end_ns, l.span_id, l.trace_id)
            > (w.start_ns, w.end_ns, w.span_id, w.trace_id), false))::int
FROM new w {resolved_join("w").replace("{", "{{").replace("}", "}}")}
LEFT JOIN firsts f ON f.call_id = w.call_id AND w.call_id_explicit
LEFT JOIN lasts l ON l.call_id = w.call_id AND w.call_id_explicit
WHERE w.end_ns >= {{low}} AND w.end_ns < {{high}}
ORDER BY w.arrival
"""

# The same rows as the starting attempts of DEPENDENTS_SQL (OFFSET 0: the end-time bounds
# stay outside, so the block-range index is the one used).
_BY_COMMITS = """FROM (
    SELECT * FROM attempts
    WHERE run_id = %(run_id)s AND ingest_batch BETWEEN %(first)s AND %(last)s
      AND ingest_batch = ANY(%(batches)s::bigint[])
    OFFSET 0
) a
WHERE a.end_ns >= %(low)s AND a.end_ns < %(high)s"""


def _without_seqscan(conn: psycopg.Connection) -> None:
    # Statistics taken while the column was mostly NULL (rows loaded before batches were
    # recorded) make the planner prefer a full scan over the block-range index.
    conn.execute("SET LOCAL enable_seqscan = off")


def fetch_commit_rows(
    conn: psycopg.Connection, run_id: str, low_ns: int, high_ns: int, batches: Sequence[int]
) -> pl.DataFrame:
    """The rows of ``run_id`` stored by these ingest commits that end in [low_ns, high_ns),
    in the order they were stored: the live window columns (ids in hex), ``run_id`` and
    :data:`FLAGS` as the database holds them now."""
    query = sql.SQL(_FLAGGED_SQL).format(
        run_id=sql.Literal(run_id),
        first=sql.Literal(min(batches, default=0)),
        last=sql.Literal(max(batches, default=0)),
        batches=sql.Literal(list(batches)),
        low=sql.Literal(low_ns),
        high=sql.Literal(high_ns),
    )
    _without_seqscan(conn)
    try:
        frame = copy_select(conn, query, _KINDS)
    finally:
        conn.execute("SET LOCAL enable_seqscan = on")
    return frame.with_columns(run_id=pl.lit(run_id, dtype=pl.String)).select(
        *LIVE_WINDOW_KINDS, "run_id", *FLAGS
    )


def dependents_of_commits(
    conn: psycopg.Connection, run_id: str, low_ns: int, high_ns: int, batches: Sequence[int]
) -> list[Dependent]:
    """Attempts whose flags or values the rows of these ingest commits ending in
    [low_ns, high_ns) changed (:data:`~storage.readers.live_window.DEPENDENTS_SQL`)."""
    if not batches:
        return []
    params = {
        "run_id": run_id,
        "first": min(batches),
        "last": max(batches),
        "batches": list(batches),
        "low": low_ns,
        "high": high_ns,
    }
    _without_seqscan(conn)
    try:
        rows = conn.execute(DEPENDENTS_SQL.replace("{source}", _BY_COMMITS), params).fetchall()
    finally:
        conn.execute("SET LOCAL enable_seqscan = on")
    return parse_dependents(rows)
