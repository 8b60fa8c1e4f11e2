"""The rows of new ingest commits as the live path folds them, with their flags, in one
statement (docs/metrics.md#live-figures).

An update folds the rows of the commits its marks name. Their flags (``rollup``,
``later_in_call``, ``has_later``: :mod:`storage.readers.attempt_flags`) were probed after
the read: a primary-key lookup to find each row again, then a lookup of its children and
two of its call's attempts. Here they come with the read: each row's call is read once
(its attempts that are not rollups say whether one comes before it and one after it), and
the commits' rows are found through the block-range index on ``ingest_batch`` whatever
the planner's statistics say. The same call lookup says which rows may change other
attempts (:data:`MAY_CHANGE_OTHERS`): the attempts they change are looked for from those
rows alone (:func:`storage.readers.attempt_flags.dependents`). All of it runs on the
caller's connection and transaction."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl
import psycopg
from psycopg import sql

from tpmledger.storage.codecs.binary_copy import Kind
from tpmledger.storage.readers.attempt_frames import copy_select
from tpmledger.storage.readers.call_attempts import resolved_join
from tpmledger.storage.readers.live_window import (
    LIVE_WINDOW_KINDS,
    attribute_texts,
    select_list,
)

#: The flags each row comes with (0 or 1), after :data:`LIVE_WINDOW_KINDS` and ``run_id``.
FLAGS = ("rollup", "later_in_call", "has_later")
#: 1 when the row may change other attempts (it has a parent, or its explicit call other
#: attempts; a rollup may too): only those rows' dependents are looked for
#: (:func:`storage.readers.attempt_flags.dependents`).
MAY_CHANGE_OTHERS = "may_change_others"
_KINDS: dict[str, Kind] = {
    **LIVE_WINDOW_KINDS,
    **dict.fromkeys(FLAGS, "integer"),
    "partnered": "integer",
    "arrival": "integer",
}

# The commits' rows, through the block-range index on ``ingest_batch``: the run is not
# named in a form the (run_id, end_ns) index could serve, or a planner whose statistics
# predate the run (a new database, or a run still small beside the table) reads every row
# of the run on every update to find a commit's. On Citus the run is named plainly, so the
# statement runs on the run's one shard. ``arrival`` keeps the order the rows were stored
# in: they are folded in that order (sorted by it in the frame: the server sorted rows
# wider than its sort memory in a temporary file).
#
# Only the columns the statement reads are kept, the attributes as the three texts read
# from them, and the rows are not materialized: whole rows (their attributes ~1 KB a row)
# were copied into a temporary file on every update. Together: 11.6 against 20.1 µs a row
# of database time (median of 16, 51,200 rows of a 204,800-row backfill, issue 39).
_READ = (
    "trace_id", "span_id", "parent_span_id", "shard_id", "status", "start_ns", "end_ns",
    "queue_wait_s", "ttft_s", "prompt_tokens", "completion_tokens", "cache_read_tokens",
    "cache_write_tokens", "reasoning_tokens", "resend_count", "concurrency_cap", "call_id",
    "call_id_explicit", "error_type", "provider", "model", "convention",
)  # fmt: skip
_COMMITS = f"""
    SELECT {", ".join(_READ)}, {attribute_texts("attempts")},
           row_number() OVER () AS arrival FROM attempts
    WHERE ingest_batch BETWEEN {{first}} AND {{last}} AND ingest_batch = ANY({{batches}}::bigint[])
      AND {{run_named}}"""
_RUN_NAMED = "(run_id = {run_id}) IS TRUE"
_RUN_NAMED_ON_CITUS = "run_id = {run_id}"

# A rollup: a stored span of the run names it as parent (storage/readers/attempt_flags.py).
_IS_PARENT = """EXISTS (SELECT 1 FROM attempts c WHERE c.trace_id = {t}.trace_id
                   AND c.parent_span_id = {t}.span_id AND c.run_id = {{run_id}})"""

# Each row with its flags: its call's attempts that are not rollups, read once per row
# through the (run_id, call_id) index, say whether one comes before it and one after it.
# The same lookup says whether the call has other attempts at all (rollups too): a row
# without them, without a parent and that is no rollup changes no other attempt
# (DEPENDENTS_SQL's kinds 2 and 4 need another attempt of its call, kinds 1, 3 and 6 a
# parent, kind 5 a child), so the dependents are looked for from the other rows only.
_FLAGGED_SQL = f"""
WITH new AS NOT MATERIALIZED ({{commits}}
)
SELECT {select_list("w", texts_read=True)},
       ({_IS_PARENT.format(t="w")})::int,
       (w.resend_count IS NULL AND coalesce(k.earlier, false))::int,
       coalesce(k.later, false)::int,
       (w.parent_span_id IS NOT NULL OR coalesce(k.others, false))::int,
       w.arrival
FROM new w {resolved_join("w", "{run_id}")}
LEFT JOIN LATERAL (
    SELECT bool_or(b.leaf AND (b.start_ns, b.end_ns, b.span_id)
                              < (w.start_ns, w.end_ns, w.span_id)) AS earlier,
           bool_or(b.leaf AND (b.start_ns, b.end_ns, b.span_id, b.trace_id)
                              > (w.start_ns, w.end_ns, w.span_id, w.trace_id)) AS later,
           bool_or((b.trace_id, b.span_id) <> (w.trace_id, w.span_id)) AS others
    FROM (
        SELECT b.trace_id, b.span_id, b.start_ns, b.end_ns, NOT {_IS_PARENT.format(t="b")} AS leaf
        FROM attempts b
        WHERE w.call_id_explicit AND b.run_id = {{run_id}} AND b.call_id_explicit
          AND b.call_id = w.call_id
        OFFSET 0  -- one rollup probe per attempt of the call, not one per aggregate
    ) b
) k ON TRUE
WHERE w.end_ns >= {{low}} AND w.end_ns < {{high}}
"""


def _without_seqscan(conn: psycopg.Connection) -> None:
    # Statistics taken while the column was mostly NULL (rows loaded before batches were
    # recorded) make the planner prefer a full scan over the block-range index.
    conn.execute("SET LOCAL enable_seqscan = off")


def _commits(run_id: str, batches: Sequence[int], on_citus: bool) -> sql.Composed:
    return sql.SQL(_COMMITS).format(
        first=sql.Literal(min(batches, default=0)),
        last=sql.Literal(max(batches, default=0)),
        batches=sql.Literal(list(batches)),
        run_named=sql.SQL(_RUN_NAMED_ON_CITUS if on_citus else _RUN_NAMED).format(
            run_id=sql.Literal(run_id)
        ),
    )


def fetch_commit_rows(
    conn: psycopg.Connection,
    run_id: str,
    low_ns: int,
    high_ns: int,
    batches: Sequence[int],
    *,
    on_citus: bool = False,
) -> pl.DataFrame:
    """The rows of ``run_id`` stored by these ingest commits that end in [low_ns, high_ns),
    in the order they were stored: the live window columns (ids in hex), ``run_id``,
    :data:`FLAGS` as the database holds them now and :data:`MAY_CHANGE_OTHERS`.
    ``on_citus``: ``attempts`` is distributed
    (storage.server.distribution.attempts_distributed)."""
    query = sql.SQL(_FLAGGED_SQL).format(
        commits=_commits(run_id, batches, on_citus),
        run_id=sql.Literal(run_id),
        low=sql.Literal(low_ns),
        high=sql.Literal(high_ns),
    )
    _without_seqscan(conn)
    try:
        frame = copy_select(conn, query, _KINDS)
    finally:
        conn.execute("SET LOCAL enable_seqscan = on")
    if not frame["arrival"].is_sorted():  # nearly always in order already: no copy
        frame = frame.sort("arrival")
    return frame.with_columns(
        run_id=pl.lit(run_id, dtype=pl.String),
        **{MAY_CHANGE_OTHERS: pl.max_horizontal("partnered", "rollup")},
    ).select(*LIVE_WINDOW_KINDS, "run_id", *FLAGS, MAY_CHANGE_OTHERS)
