"""An LLM call's HTTP attempts take their call's target and tokens, at read time
(docs/conventions.md#attempts).

Ingest stores the HTTP client spans of an LLM call as attempts (``convention = 'http'``,
``call_id`` = the LLM span's id) and the LLM span as it is; the LLM span is then a rollup
(a stored span names it as parent) and left out of every figure, as nested LLM spans are.
What the HTTP spans do not know is read from their parent when figures are made, so the
order and batching in which a trace's spans arrive never matter:

- ``model`` and ``provider`` of every HTTP attempt = its LLM span's (one target per
  deployment, successes and failures alike);
- tokens (prompt, completion, cache, reasoning) and TTFT go to one attempt: the call's
  last successful HTTP attempt (by end time, then span id), else its last. TTFT is
  re-based on that attempt's own start (first token − attempt start).

An HTTP attempt whose parent was never stored keeps its own (empty) values: the attempts
of a call of their own. Rows of other conventions are returned as stored, so runs
without HTTP attempts read exactly what they read before.

:func:`resolved_join` is the ``LEFT JOIN LATERAL`` every figure's read adds after
``FROM attempts <alias>``; :func:`resolved_columns` the select list over it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Final

import psycopg

HTTP_CONVENTION: Final = "http"
#: Token columns that follow the call to its carrying attempt.
CARRIED_TOKENS: Final = (
    "prompt_tokens",
    "completion_tokens",
    "reported_total_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
)
#: Columns that follow the call to every attempt when the attempt has none.
CALL_TARGET: Final = ("model", "provider")
RESOLVED: Final = frozenset({*CARRIED_TOKENS, *CALL_TARGET, "ttft_s"})
_ALIAS: Final = "cp"


def _received_by(alias: str, received_by: datetime | None) -> str:
    if received_by is None:
        return "TRUE"
    # An ISO text literal: the rows a rebuilt version saw (storage/readers/seal_scope.py).
    return f"{alias}.received_at <= '{received_by.isoformat()}'::timestamptz"


def resolved_join(alias: str, run: str, received_by: datetime | None = None) -> str:
    """``LEFT JOIN LATERAL`` of each HTTP attempt of ``alias`` to its LLM span (``cp``):
    the parent's target, tokens and TTFT, and whether this attempt carries them. For rows
    of other conventions the lateral is not run (its condition holds no column of its own).
    ``run``: the SQL of the one run every row of ``alias`` belongs to (a literal or a
    placeholder; the caller's statement filters ``alias`` on the same run). The lookups
    name it rather than ``alias.run_id``: on Citus a statement whose every table names
    the same run goes whole to the worker holding that run, while a lateral join on a
    column of an outer row it cannot route (docs/operations.md#scaling-out).
    ``received_by``: only rows stored by then (a rebuilt version's scope); a checkpoint's
    end-time cut does not apply, so which attempt carries a call never depends on it."""
    a = alias
    return f"""
LEFT JOIN LATERAL (
    SELECT p.model, p.provider, p.start_ns, p.ttft_s,
           {", ".join(f"p.{c}" for c in CARRIED_TOKENS)},
           NOT EXISTS (
               SELECT 1 FROM attempts s
               WHERE s.trace_id = {a}.trace_id AND s.parent_span_id = {a}.parent_span_id
                 AND s.run_id = {run} AND s.convention = '{HTTP_CONVENTION}'
                 AND {_received_by("s", received_by)}
                 AND (s.status = 'ok', s.end_ns, s.span_id)
                     > ({a}.status = 'ok', {a}.end_ns, {a}.span_id)
           ) AS carries
    FROM attempts p
    WHERE {a}.convention = '{HTTP_CONVENTION}' AND p.trace_id = {a}.trace_id
      AND p.span_id = {a}.parent_span_id AND p.run_id = {run}
      AND p.convention IS DISTINCT FROM '{HTTP_CONVENTION}'
      AND {_received_by("p", received_by)}
    OFFSET 0  -- never flattened into a join over the run: one gated lookup per row
) {_ALIAS} ON TRUE"""


#: Whether a run has HTTP attempts at all (the partial index of migration 0013): a read
#: of a run without them skips the join and reads the table as it did before.
HAS_HTTP_SQL: Final = (
    f"SELECT EXISTS (SELECT 1 FROM attempts WHERE run_id = %s AND convention = '{HTTP_CONVENTION}')"
)


def run_has_http(conn: psycopg.Connection, run_id: str) -> bool:
    """True when ``run_id`` has a stored HTTP attempt (one index probe)."""
    row = conn.execute(HAS_HTTP_SQL, (run_id,)).fetchone()
    return bool(row and row[0])


def resolved_column(name: str, alias: str) -> str:
    """The SQL of column ``name`` of ``alias`` as figures read it (see the module doc)."""
    c = _ALIAS
    if name in CARRIED_TOKENS:
        return f"CASE WHEN {c}.carries THEN {c}.{name} ELSE {alias}.{name} END"
    if name in CALL_TARGET:
        return f"coalesce({alias}.{name}, {c}.{name})"
    if name == "ttft_s":
        rebased = f"{c}.ttft_s - ({alias}.start_ns - {c}.start_ns)::float8 / 1e9::float8"
        return (
            f"CASE WHEN {c}.carries THEN (CASE WHEN {rebased} >= 0 THEN {rebased} END) "
            f"ELSE {alias}.ttft_s END"
        )
    return f"{alias}.{name}"


def resolved_columns(names: Iterable[str], alias: str, *, joined: bool = True) -> str:
    """A select list of ``names`` over ``alias`` joined by :func:`resolved_join` (with
    ``joined`` False: the stored columns, for a run without HTTP attempts)."""
    if not joined:
        return ", ".join(f"{alias}.{name}" for name in names)
    return ", ".join(resolved_column(name, alias) for name in names)
