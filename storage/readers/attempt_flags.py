"""The two facts about an attempt that depend on other attempts, and the attempts new
ones change (docs/metrics.md#live-figures).

``rollup`` (a stored span of the run names it as parent), ``later_in_call`` (an earlier
non-rollup attempt of its explicit call exists) and ``has_later`` (a later one exists:
the attempt is not its call's last) are probed per attempt (:func:`probe_flags`);
:func:`dependents` finds the attempts elsewhere whose flags, or read values, new attempts
change. The rows of new ingest commits come with their flags already
(:mod:`storage.readers.commit_rows`). All of it runs on the caller's connection and
transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl
import psycopg

# A span is a rollup when a stored LLM span of its run names it as parent (rollups are
# left out of every figure); an attempt without a resend count is a retry when an earlier
# non-rollup attempt of its explicit call exists (docs/metrics.md#retries). Both probes
# use the partial indexes of migration 0003, for the attempts given only.
_IS_PARENT = """EXISTS (SELECT 1 FROM attempts c WHERE c.trace_id = {t}.trace_id
                   AND c.parent_span_id = {t}.span_id AND c.run_id = %(run_id)s{skip_c})"""
# Rows of these ingest commits left out (the flags as the previous update saw them).
_SKIP = " AND coalesce({t}.ingest_batch <> ALL(%(skip)s::bigint[]), true)"


def _probe_sql(skip: bool) -> str:
    def parent(t: str) -> str:
        return _IS_PARENT.format(t=t, skip_c=_SKIP.format(t="c") if skip else "")

    skip_b = _SKIP.format(t="b") if skip else ""
    return f"""
SELECT encode(a.trace_id, 'hex'), encode(a.span_id, 'hex'),
       ({parent("a")})::int,
       (a.resend_count IS NULL AND a.call_id_explicit AND EXISTS (
            SELECT 1 FROM attempts b
            WHERE b.run_id = %(run_id)s AND b.call_id_explicit AND b.call_id = a.call_id
              AND (b.start_ns, b.end_ns, b.span_id) < (a.start_ns, a.end_ns, a.span_id)
              AND NOT {parent("b")}{skip_b}))::int,
       (a.call_id_explicit AND EXISTS (
            SELECT 1 FROM attempts b
            WHERE b.run_id = %(run_id)s AND b.call_id_explicit AND b.call_id = a.call_id
              AND (b.start_ns, b.end_ns, b.span_id, b.trace_id)
                  > (a.start_ns, a.end_ns, a.span_id, a.trace_id)
              AND NOT {parent("b")}{skip_b}))::int
{{source}}
"""


_PROBE_SQL = _probe_sql(skip=False)
_PROBE_BEFORE_SQL = _probe_sql(skip=True)

# The attempts the probes and dependents start from: given ids (one primary-key lookup
# each, never a scan), or every attempt ending in a range (a worker's first read of a
# busy minute: one set-based pass instead of hundreds of thousands of lookups).
_BY_IDS = """FROM generate_series(0, %(count)s - 1) AS g(i)
CROSS JOIN LATERAL (
    SELECT substring(%(ids)s::bytea FROM g.i * 24 + 1 FOR 16) AS trace_id,
           substring(%(ids)s::bytea FROM g.i * 24 + 17 FOR 8) AS span_id
) u
CROSS JOIN LATERAL (
    SELECT x.trace_id, x.span_id, x.parent_span_id, x.run_id, x.call_id, x.call_id_explicit,
           x.resend_count, x.start_ns, x.end_ns, x.convention
    FROM attempts x
    WHERE x.trace_id = u.trace_id AND x.span_id = u.span_id AND x.run_id = %(run_id)s
    LIMIT 1
) a"""
_BY_RANGE = """FROM attempts a
WHERE a.run_id = %(run_id)s AND a.end_ns >= %(low)s AND a.end_ns < %(high)s"""

# What the given (new) attempts change elsewhere: their parents become rollups (kind 1),
# and later attempts of the same explicit call without a resend count move in the call
# (kind 2); a parent that is itself an explicit call's attempt moves its call's others
# (kind 3: the order among non-rollups changed, and which attempt is the call's last);
# earlier attempts of the same explicit call are no longer its last (kind 4; kinds 2 and
# 4 come from one lookup of the call, an attempt that is both once, as kind 2: the two give
# the same Dependent). An LLM span gives its HTTP attempts their target and tokens (kind
# 5), and a new HTTP attempt may take the call's tokens from a sibling (kind 6): their
# values changed, not their flags (storage/readers/call_attempts.py).
DEPENDENTS_SQL = """
WITH given AS (
    SELECT a.trace_id, a.span_id, a.parent_span_id, a.run_id, a.call_id, a.call_id_explicit,
           a.start_ns, a.end_ns, a.convention
    {source}
), parents AS (
    SELECT DISTINCT p.trace_id, p.span_id, p.run_id, p.call_id, p.call_id_explicit,
           p.start_ns, p.end_ns, p.queue_wait_s
    FROM given g
    CROSS JOIN LATERAL (  -- LATERAL: one index lookup per attempt, never a hash join
        SELECT x.* FROM attempts x
        WHERE x.trace_id = g.trace_id AND x.span_id = g.parent_span_id AND x.run_id = %(run_id)s
        OFFSET 0
    ) p
    WHERE g.parent_span_id IS NOT NULL
)
SELECT 1, encode(p.trace_id, 'hex'), encode(p.span_id, 'hex'), p.start_ns, p.end_ns,
       p.queue_wait_s
FROM parents p
UNION ALL
SELECT CASE WHEN o.later THEN 2 ELSE 4 END,
       encode(o.trace_id, 'hex'), encode(o.span_id, 'hex'), o.end_ns, o.end_ns, NULL
FROM given g
CROSS JOIN LATERAL (  -- one lookup of the call for both kinds
    SELECT x.trace_id, x.span_id, x.end_ns,
           x.resend_count IS NULL
           AND (x.start_ns, x.end_ns, x.span_id) > (g.start_ns, g.end_ns, g.span_id) AS later
    FROM attempts x
    WHERE x.run_id = %(run_id)s AND x.call_id_explicit AND x.call_id = g.call_id
      AND ((x.resend_count IS NULL
            AND (x.start_ns, x.end_ns, x.span_id) > (g.start_ns, g.end_ns, g.span_id))
           OR (x.start_ns, x.end_ns, x.span_id, x.trace_id)
              < (g.start_ns, g.end_ns, g.span_id, g.trace_id))
    OFFSET 0  -- keeps the planner from turning the lookups into a scan of the table
) o
WHERE g.call_id_explicit
UNION ALL
SELECT 3, encode(o.trace_id, 'hex'), encode(o.span_id, 'hex'), o.end_ns, o.end_ns, NULL
FROM parents p
CROSS JOIN LATERAL (
    SELECT x.trace_id, x.span_id, x.end_ns FROM attempts x
    WHERE x.run_id = %(run_id)s AND x.call_id_explicit AND x.call_id = p.call_id
    OFFSET 0
) o
WHERE p.call_id_explicit
UNION ALL
SELECT 5, encode(o.trace_id, 'hex'), encode(o.span_id, 'hex'), o.end_ns, o.end_ns, NULL
FROM given g
CROSS JOIN LATERAL (
    SELECT x.trace_id, x.span_id, x.end_ns FROM attempts x
    WHERE x.trace_id = g.trace_id AND x.parent_span_id = g.span_id AND x.run_id = %(run_id)s
      AND x.convention = 'http'
    OFFSET 0
) o
WHERE g.convention IS DISTINCT FROM 'http'
UNION ALL
SELECT 6, encode(o.trace_id, 'hex'), encode(o.span_id, 'hex'), o.end_ns, o.end_ns, NULL
FROM given g
CROSS JOIN LATERAL (
    SELECT x.trace_id, x.span_id, x.end_ns FROM attempts x
    WHERE x.trace_id = g.trace_id AND x.parent_span_id = g.parent_span_id
      AND x.run_id = %(run_id)s AND x.convention = 'http' AND x.span_id <> g.span_id
    OFFSET 0
) o
WHERE g.convention = 'http' AND g.parent_span_id IS NOT NULL
"""


@dataclass(frozen=True)
class Dependent:
    """An attempt whose derived flags a new attempt changed, and its interval."""

    trace_id: str  # hex
    span_id: str  # hex
    began_ns: int  # queued (or admitted) time: the interval whose minutes to recompute
    end_ns: int
    becomes_rollup: bool
    # Its read values changed (an HTTP attempt's call arrived): its minutes are read whole.
    values_changed: bool = False


#: Above this many attempts the probes work on a range of end times instead of ids.
RANGE_PROBE_MIN = 20_000


def _source(
    trace_ids: Sequence[str], span_ids: Sequence[str], end_range: tuple[int, int] | None
) -> tuple[str, dict[str, Any]]:
    """The probes' starting attempts: the ids, or (many ids) every attempt ending in
    ``end_range``, which holds them; rows beyond the ids are harmless extra work."""
    if end_range is not None and len(trace_ids) >= RANGE_PROBE_MIN:
        return _BY_RANGE, {"low": end_range[0], "high": end_range[1]}
    # One bytea of (trace_id 16 bytes, span_id 8 bytes) pairs: an array parameter of
    # thousands of ids cost more to encode than the lookups themselves.
    ids = bytes.fromhex("".join(t + s for t, s in zip(trace_ids, span_ids, strict=True)))
    return _BY_IDS, {"ids": ids, "count": len(trace_ids)}


def probe_flags(
    conn: psycopg.Connection,
    run_id: str,
    trace_ids: Sequence[str],
    span_ids: Sequence[str],
    end_range: tuple[int, int] | None = None,
    *,
    before_batches: Sequence[int] | None = None,
) -> pl.DataFrame:
    """``rollup``, ``later_in_call`` and ``has_later`` (0/1) of the given attempts (hex
    ids; ``has_later``: a later non-rollup attempt of its explicit call exists); attempts
    ending in ``end_range`` may come back too. With ``before_batches``, the flags as they
    were without the rows of those ingest commits."""
    schema = {
        "trace_id": pl.String,
        "span_id": pl.String,
        "rollup": pl.Int64,
        "later_in_call": pl.Int64,
        "has_later": pl.Int64,
    }
    if not trace_ids:
        return pl.DataFrame(schema=schema)
    source, params = _source(trace_ids, span_ids, end_range)
    probe = _PROBE_SQL if before_batches is None else _PROBE_BEFORE_SQL
    if before_batches is not None:
        params["skip"] = list(before_batches)
    rows = conn.execute(probe.replace("{source}", source), {"run_id": run_id, **params}).fetchall()
    return pl.DataFrame(rows, schema=schema, orient="row")


def dependents(
    conn: psycopg.Connection,
    run_id: str,
    trace_ids: Sequence[str],
    span_ids: Sequence[str],
    end_range: tuple[int, int] | None = None,
) -> list[Dependent]:
    """Attempts whose flags the given (new) attempts changed (see ``DEPENDENTS_SQL``)."""
    if not trace_ids:
        return []
    source, params = _source(trace_ids, span_ids, end_range)
    rows = conn.execute(
        DEPENDENTS_SQL.replace("{source}", source), {"run_id": run_id, **params}
    ).fetchall()
    return parse_dependents(rows)


def dependents_in_range(
    conn: psycopg.Connection, run_id: str, low_ns: int, high_ns: int
) -> list[Dependent]:
    """Attempts whose flags the attempts ending in [low_ns, high_ns) change (for marks
    that name no ingest commit: every attempt of their range counts as new)."""
    params = {"run_id": run_id, "low": low_ns, "high": high_ns}
    rows = conn.execute(DEPENDENTS_SQL.replace("{source}", _BY_RANGE), params).fetchall()
    return parse_dependents(rows)


def parse_dependents(rows: list[Any]) -> list[Dependent]:
    """The rows of :data:`DEPENDENTS_SQL` as :class:`Dependent` s."""
    out = []
    for kind, trace_id, span_id, start_ns, end_ns, wait_s in rows:
        waited = round(min(float(wait_s), 3e9) * 1e9) if wait_s and wait_s > 0 else 0
        out.append(
            Dependent(trace_id, span_id, int(start_ns) - waited, int(end_ns), kind == 1, kind >= 5)
        )
    return out
