"""Reads attempts for the live minute states (docs/metrics.md#live-figures): the rows of
new ingest commits, or a range of minutes (and the attempts overlapping it) a page at a
time, each with the flags probed in the database (``rollup``, ``later_in_call``,
``has_later``) and ``tool_held_ns``, and folds them into the states. An attempt whose flags
a new commit changed is taken out with the flags it had before the commit and put back with
today's (:meth:`AttemptReader.refold`). An update (:mod:`analytics.live.run_update`)
decides what to read; this module reads and folds it.
"""

from __future__ import annotations

import polars as pl
import psycopg

from tpmledger.analytics.kernels.tool_overlap import tool_held_ns
from tpmledger.analytics.live.minute_state import MinuteState, fold_ending, fold_overlap
from tpmledger.durations import MINUTE_NS, SECOND_NS
from tpmledger.storage.readers.attempt_flags import Dependent, dependents, probe_flags
from tpmledger.storage.readers.commit_rows import MAY_CHANGE_OTHERS, fetch_commit_rows
from tpmledger.storage.readers.live_window import (
    fetch_attempts,
    fetch_window,
    fetch_window_page,
)
from tpmledger.storage.server.distribution import attempts_distributed
from tpmledger.storage.writers.live_store import LiveRunFacts
from tpmledger.storage.writers.tool_span_store import (
    count_tools_by_start_minute,
    fetch_trace_tools,
    run_has_tool_spans,
)

#: An attempt's key.
KEYS = ["trace_id", "span_id"]
#: A minute read whole from the table is folded this many attempts at a time.
PAGE_ROWS = 50_000


class AttemptReader:
    """Reads attempts for the minute states: the rows of new ingest commits, or a range
    of minutes (and the attempts overlapping it) page by page, each with its flags."""

    def __init__(self, conn: psycopg.Connection, facts: LiveRunFacts) -> None:
        self.conn, self.facts = conn, facts
        # Runs without tool spans (most) skip the per-trace tool lookups.
        self.has_tools = run_has_tool_spans(conn, facts.run_id)
        self.on_citus = attempts_distributed(conn)
        # The ids (trace, span) of the rows the last new_rows read that may change others.
        self._changing: tuple[list[str], list[str]] = ([], [])

    def with_tool_held(
        self, rows: pl.DataFrame, without_batches: list[int] | None = None
    ) -> pl.DataFrame:
        """``rows`` with ``tool_held_ns`` (docs/metrics.md#diagnostics) from the tool spans
        of their traces stored now, or before the ingest commits ``without_batches``."""
        if not self.has_tools or rows.height == 0:
            return rows
        tools = fetch_trace_tools(self.conn, self.facts.run_id, rows["trace_id"].to_list())
        if without_batches is not None:
            skip = set(without_batches)
            tools = [t for t in tools if t[3] is None or t[3] not in skip]
        frame = pl.DataFrame(
            {
                "trace_id": [t[0] for t in tools],
                "tool_start": [t[1] for t in tools],
                "tool_end": [t[2] for t in tools],
            },
            schema={"trace_id": pl.String, "tool_start": pl.Int64, "tool_end": pl.Int64},
        )
        held = tool_held_ns(rows, frame)
        return rows.with_columns(tool_held_ns=pl.Series(held, dtype=pl.Int64))

    def bounds(self, minutes: list[int]) -> tuple[int, int]:
        # Every attempt overlapping the range ends before its end + the longest interval.
        return minutes[0], minutes[-1] + MINUTE_NS + self.facts.max_slot_ns + SECOND_NS

    def new_rows(self, batches: list[int], first: int, last: int) -> pl.DataFrame:
        """The rows of these ingest commits overlapping minutes ``first``..``last``, with
        their flags (read with them, set-based: storage/readers/commit_rows.py)."""
        low, high = self.bounds([first, last])
        rows = fetch_commit_rows(
            self.conn, self.facts.run_id, low, high, batches, on_citus=self.on_citus
        )
        # The rows that may change other attempts: :meth:`new_dependents` starts from them.
        changing = rows.filter(pl.col(MAY_CHANGE_OTHERS) == 1)
        self._changing = (changing["trace_id"].to_list(), changing["span_id"].to_list())
        return self.with_tool_held(rows.drop(MAY_CHANGE_OTHERS))

    def new_dependents(self) -> list[Dependent]:
        """The attempts whose flags or values the rows the last :meth:`new_rows` gave
        changed, looked for from the rows that may change others (most rows: none)."""
        return dependents(self.conn, self.facts.run_id, *self._changing)

    def _flagged(self, rows: pl.DataFrame, end_range: tuple[int, int] | None) -> pl.DataFrame:
        """``rows`` with their probed flags (a range probe when ``end_range`` holds them all)."""
        probed = probe_flags(
            self.conn,
            self.facts.run_id,
            rows["trace_id"].to_list(),
            rows["span_id"].to_list(),
            end_range,
        )
        return rows.join(probed.unique(KEYS), on=KEYS, how="left")

    def refold(
        self, states: dict[int, MinuteState], keys: list[tuple[str, str]], batches: list[int]
    ) -> int:
        """Take the given attempts out of ``states`` with the flags they had before these
        ingest commits, and put them back with their flags now; returns how many changed."""
        trace_ids, span_ids = [k[0] for k in keys], [k[1] for k in keys]
        rows = fetch_attempts(self.conn, self.facts.run_id, trace_ids, span_ids)
        if rows.height == 0:
            return 0
        before = probe_flags(
            self.conn,
            self.facts.run_id,
            rows["trace_id"].to_list(),
            rows["span_id"].to_list(),
            before_batches=batches,
        )
        old = self.with_tool_held(rows.join(before.unique(KEYS), on=KEYS, how="left"), batches)
        now = self.with_tool_held(self._flagged(rows, None))
        flags = ["rollup", "later_in_call", "has_later"]
        if "tool_held_ns" in now.columns:
            flags.append("tool_held_ns")  # a new tool span changed the time held
        same = old.select(*KEYS, *flags).join(
            now.select(*KEYS, *flags), on=[*KEYS, *flags], how="semi", nulls_equal=True
        )
        old = old.join(same, on=KEYS, how="anti")
        now = now.join(same, on=KEYS, how="anti")
        fold_ending(states, old, -1)
        fold_overlap(states, old, -1)
        fold_ending(states, now)
        fold_overlap(states, now)
        return now.height

    def build(self, states: dict[int, MinuteState]) -> int:
        """Fold every attempt ending in or overlapping the (contiguous) minutes of
        ``states`` into them, :data:`PAGE_ROWS` at a time; returns how many were read."""
        low, high = self.bounds(sorted(states))
        if self.has_tools:
            first, last = min(states), max(states) + MINUTE_NS
            counts = count_tools_by_start_minute(self.conn, self.facts.run_id, first, last)
            for minute, state in states.items():
                state.tool_spans = counts.get(minute, 0)
        read = 0
        while low < high:
            page = fetch_window_page(self.conn, self.facts.run_id, low, high, PAGE_ROWS)
            upto = high
            if page.height >= PAGE_ROWS:  # the page's last end time may continue: next page
                upto = int(page.get_column("end_ns").to_numpy().max())
                page = page.filter(pl.col("end_ns") < upto)
                if page.height == 0:  # a page of one end time: that end time whole
                    page = fetch_window(self.conn, self.facts.run_id, upto, upto + 1)
                    upto += 1
            rows = self.with_tool_held(self._flagged(page, (low, upto)))
            del page
            fold_ending(states, rows)
            fold_overlap(states, rows)
            read += rows.height
            del rows
            low = upto
        return read
