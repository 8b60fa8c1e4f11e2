"""What the live path reads of the attempts of touched minutes (docs/metrics.md#live-figures).

A window is every attempt ending in a range of end times, read through the (run_id,
end_ns) index; given attempts are read by id. The rows of given ingest commits, with
their flags, are read by :mod:`storage.readers.commit_rows`; the flags that depend on
other attempts, and the attempts new ones change, by :mod:`storage.readers.attempt_flags`.
All of it runs on the caller's connection and transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl
import psycopg
from psycopg import sql

from tpmledger.storage.codecs.binary_copy import Kind
from tpmledger.storage.readers.attempt_frames import copy_select
from tpmledger.storage.readers.call_attempts import resolved_column, resolved_join

#: Columns of a live window frame: what the minute figures need (ids in hex for the
#: flag cache), nothing more: a busy minute is re-read on every update.
LIVE_WINDOW_KINDS: dict[str, Kind] = {
    "trace_id": "hex",
    "span_id": "hex",
    "shard_id": "text",
    "status": "text",
    "start_ns": "integer",
    "end_ns": "integer",
    "queue_wait_s": "float",
    "ttft_s": "float",
    "prompt_tokens": "integer",
    "completion_tokens": "integer",
    "resend_count": "integer",
    "concurrency_cap": "integer",
    "call_id_explicit": "integer",
    "error_type": "text",
    "deadline_text": "text",
    "timeout_text": "text",
    # For target saturation (docs/metrics.md#diagnostics): the target and its declared cap.
    "provider": "text",
    "model": "text",
    "target_cap_text": "text",
    # For the per-minute extras of /metrics (storage.writers.minute_extras_store).
    "cache_read_tokens": "integer",
    "cache_write_tokens": "integer",
    "reasoning_tokens": "integer",
}


def _columns(alias: str) -> str:
    """The select list of a live window frame over ``alias`` and its ``FROM`` clause
    (``{table}`` to fill in). HTTP attempts' call lookups name the run the statement's
    ``{run_id}`` names (storage/readers/call_attempts.py)."""
    return f"""{select_list(alias)}
FROM {{table}} {alias} {resolved_join(alias, "{run_id}")}"""


#: The live window's values held in attributes, by column: the attribute, and whether the
#: resource's attribute stands in when the span has none.
_ATTRIBUTE_TEXTS = {
    "deadline_text": ("tpmledger.deadline_s", False),
    "timeout_text": ("tpmledger.request.timeout_s", True),
    "target_cap_text": ("tpmledger.target.concurrency.cap", True),
}


def _attribute_text(alias: str, column: str) -> str:
    key, from_resource = _ATTRIBUTE_TEXTS[column]
    span_value = f"{alias}.span_attributes ->> '{key}'"
    if not from_resource:
        return span_value
    return f"coalesce({span_value},\n                {alias}.resource_attributes ->> '{key}')"


def attribute_texts(alias: str) -> str:
    """A select list of the live window's attribute-held values of ``alias``, each named
    as its column: a narrow copy of attempts (storage/readers/commit_rows.py) carries
    these three texts instead of the attributes."""
    return ", ".join(f"{_attribute_text(alias, c)} AS {c}" for c in _ATTRIBUTE_TEXTS)


def select_list(alias: str, *, texts_read: bool = False) -> str:
    """The columns of :data:`LIVE_WINDOW_KINDS` over ``alias`` joined by
    :func:`~storage.readers.call_attempts.resolved_join` (HTTP attempts read their call's
    target and tokens: storage/readers/call_attempts.py). ``texts_read``: ``alias``
    carries the attribute-held values as columns already (:func:`attribute_texts`)."""

    def c(name: str) -> str:
        return resolved_column(name, alias)

    def text(column: str) -> str:
        return f"{alias}.{column}" if texts_read else _attribute_text(alias, column)

    a = alias
    return f"""{a}.trace_id, {a}.span_id, {a}.shard_id, {a}.status, {a}.start_ns, {a}.end_ns,
       {a}.queue_wait_s, {c("ttft_s")}, {c("prompt_tokens")}, {c("completion_tokens")},
       {a}.resend_count, {a}.concurrency_cap, {a}.call_id_explicit::int,
       {a}.error_type, {text("deadline_text")}, {text("timeout_text")},
       {c("provider")}, {c("model")}, {text("target_cap_text")},
       {c("cache_read_tokens")}, {c("cache_write_tokens")}, {c("reasoning_tokens")}"""


_WINDOW_SQL = f"""
SELECT {_columns("w").replace("{table}", "attempts")}
WHERE w.run_id = {{run_id}} AND w.end_ns >= {{low}} AND w.end_ns < {{high}}
"""
# One page of a range, in end-time order (a busy minute is read a page at a time).
_PAGE_SQL = f"""
SELECT {_columns("w").replace("{table}", "attempts")}
WHERE w.run_id = {{run_id}} AND w.end_ns >= {{low}} AND w.end_ns < {{high}}
ORDER BY w.end_ns
LIMIT {{limit}}
"""


def fetch_window(
    conn: psycopg.Connection,
    run_id: str,
    low_ns: int,
    high_ns: int,
) -> pl.DataFrame:
    """Attempts of ``run_id`` ending in [low_ns, high_ns) (ids as lowercase hex). The rows
    of given ingest commits: storage/readers/commit_rows.py."""
    query = sql.SQL(_WINDOW_SQL).format(
        run_id=sql.Literal(run_id), low=sql.Literal(low_ns), high=sql.Literal(high_ns)
    )
    frame = copy_select(conn, query, LIVE_WINDOW_KINDS)
    return frame.with_columns(run_id=pl.lit(run_id, dtype=pl.String))


def fetch_window_page(
    conn: psycopg.Connection, run_id: str, low_ns: int, high_ns: int, limit: int
) -> pl.DataFrame:
    """The first ``limit`` attempts of ``run_id`` ending in [low_ns, high_ns), by end time
    (ties at the last end time may continue past the page)."""
    query = sql.SQL(_PAGE_SQL).format(
        run_id=sql.Literal(run_id),
        low=sql.Literal(low_ns),
        high=sql.Literal(high_ns),
        limit=sql.Literal(limit),
    )
    frame = copy_select(conn, query, LIVE_WINDOW_KINDS)
    return frame.with_columns(run_id=pl.lit(run_id, dtype=pl.String))


# One primary-key lookup per id (LIMIT 1 in a LATERAL: never a scan of the run's rows).
_BY_ID_ROWS_SQL = f"""
WITH given AS MATERIALIZED (
    SELECT x.* FROM generate_series(0, {{count}} - 1) AS g(i)
    CROSS JOIN LATERAL (
        SELECT x.* FROM attempts x
        WHERE x.trace_id = substring({{ids}}::bytea FROM g.i * 24 + 1 FOR 16)
          AND x.span_id = substring({{ids}}::bytea FROM g.i * 24 + 17 FOR 8)
          AND x.run_id = {{run_id}}
        LIMIT 1
    ) x
)
SELECT {_columns("w").replace("{table}", "given")}
"""


def fetch_attempts(
    conn: psycopg.Connection, run_id: str, trace_ids: Sequence[str], span_ids: Sequence[str]
) -> pl.DataFrame:
    """The live window columns of the given attempts (hex ids) of ``run_id``."""
    ids = bytes.fromhex("".join(t + s for t, s in zip(trace_ids, span_ids, strict=True)))
    query = sql.SQL(_BY_ID_ROWS_SQL).format(
        run_id=sql.Literal(run_id), ids=sql.Literal(ids), count=sql.Literal(len(trace_ids))
    )
    frame = copy_select(conn, query, LIVE_WINDOW_KINDS)
    return frame.with_columns(run_id=pl.lit(run_id, dtype=pl.String))
