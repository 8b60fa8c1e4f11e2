"""A run's minute table and run figures, folded one end-time chunk at a time
(docs/provenance.md#streaming-seal).

The streaming seal reads a run in chunks of whole minutes (:class:`SealChunk`); this module
keeps only what merges exactly across them, so memory follows the chunk and the run's
minutes, not its attempts:

- minute rows: a minute's counts, tokens and percentiles depend only on the attempts that
  end in it, which one chunk holds whole; in-flight and queue depth are sampled at the
  chunk's own seconds from its attempts and those of ``reach`` (attempts still holding a
  slot at the chunk's end), so every second is sampled once, by one chunk;
- run sums (attempts, tokens, successes, retries, per-shard tokens, seconds with a queue
  and sagging seconds) add up;
- logical calls, call success and retry causes are sums over attempts once each attempt
  knows whether it is its call's last (``call_last``, settled before the walk);
- run percentiles and moments need every value: each chunk hands over its TTFT and
  latency values sorted minute by minute (16 bytes per attempt at most), and the run's
  figures are computed over their concatenation exactly as a whole-run pass does;
- run-wide rules (retries measured at all, shards that report queue waits, caps) are
  applied once, to the finished table.

This is the product's only implementation of the run figures. Tests prove the result
equal, row for row and figure for figure, to an independent whole-run pass kept as a
test oracle (tests/analytics/oracle/whole_run.py).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt
import polars as pl

from tpmledger.analytics.kernels.cell_figures import (
    ValueGroups,
    cell_figures,
    event_value_groups,
    occupied_cells,
    run_values,
)
from tpmledger.analytics.kernels.concurrency import minute_cells, second_series, seconds_before
from tpmledger.analytics.kernels.event_arrays import event_arrays, latency_seconds
from tpmledger.analytics.kernels.event_grid import EventGrid, shard_codes_among
from tpmledger.analytics.kernels.event_plans import rate_columns
from tpmledger.analytics.kernels.figure_rules import SIGNIFICANT_DIGITS, work_conserving_result
from tpmledger.analytics.kernels.group_quantiles import SortedGroups, ToValues
from tpmledger.analytics.kernels.minute_table import EMPTY_COUNTS, carries_figures
from tpmledger.analytics.kernels.run_figures import (
    RunAnalysis,
    RunContext,
    RunTotals,
    run_figures_of,
)
from tpmledger.analytics.seal.seal_chunk import SealChunk
from tpmledger.durations import MINUTE_NS, SECOND_NS
from tpmledger.storage.schema.minute_columns import MINUTE_COLUMNS
from tpmledger.storage.schema.minute_keys import WHOLE_RUN

Ints = npt.NDArray[np.int64]
_TABLE_COLUMNS = [c if c != "minute_utc" else "minute_ns" for c in MINUTE_COLUMNS]
_CONCURRENCY = ("in_flight_mean", "in_flight_max", "queue_depth_mean", "queue_depth_max")
# A chunk's (shard, minute) grid is built whole up to this many cells per event.
DENSE_CELLS_PER_EVENT = 4


def chunk_grid(
    events: pl.DataFrame, shard_ids: tuple[str, ...], low_ns: int, minute_count: int
) -> EventGrid:
    """The (shard, minute) grid of ``events`` over ``minute_count`` minutes from ``low_ns``,
    with every shard of the run (codes index the sorted ``shard_ids``)."""
    if events.height == 0:
        empty = np.zeros(0, dtype=np.int64)
        return EventGrid(shard_ids, empty, empty, low_ns, minute_count)
    codes = shard_codes_among(events.get_column("shard_id"), shard_ids)
    minutes = events.get_column("end_ns").to_numpy() // MINUTE_NS
    minutes -= low_ns // MINUTE_NS
    return EventGrid(shard_ids, codes, minutes, low_ns, minute_count)


@dataclass
class _Values:
    """One value's entries, each minute's sorted, minute after minute (see module doc)."""

    parts: list[npt.NDArray[np.generic]] = field(default_factory=list)
    nulls: int = 0

    def add(self, groups: SortedGroups) -> None:
        if groups.values.size:
            self.parts.append(groups.values)
        self.nulls += int(groups.nulls.sum())

    def groups(self, dtype: type, to_values: ToValues | None) -> ValueGroups:
        """Every value as one group (what the run-level figures read)."""
        if len(self.parts) == 1:
            values = self.parts[0]  # one chunk (a run in memory): no copy
        else:
            values = np.concatenate(self.parts) if self.parts else np.zeros(0, dtype=dtype)
        self.parts = []  # one copy at a time
        whole = SortedGroups(
            values, np.array([0, values.size], dtype=np.int64), np.array([self.nulls])
        )
        return ValueGroups(whole, whole, to_values)


@dataclass
class RunStream:
    """Folds :class:`SealChunk` s of one run, in minute order, into its minute table and
    figures (:meth:`finish`). ``shard_ids`` is every shard the run's stored attempts name
    (rollups included; shards without events are left out at the end) and ``context``
    carries the run's caps (largest declared per shard, rollups included)."""

    shard_ids: tuple[str, ...]
    context: RunContext
    rows: list[pl.DataFrame] = field(default_factory=list)
    attempts: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    successes: int = 0
    retries: int = 0
    prompt: int = 0
    completion: int = 0
    explicit_call_ids: bool = False
    resend_counts: bool = False  # some event carries resend_count
    calls: int = 0
    ok_calls: int = 0
    causes: Counter[str] = field(default_factory=Counter)
    queue_shards: set[str] = field(default_factory=set)
    first_chunk: bool = True

    def __post_init__(self) -> None:
        width = len(self.shard_ids) + 1
        self.shard_tokens: Ints = np.zeros(len(self.shard_ids), dtype=np.int64)
        self.queue_seconds: Ints = np.zeros(width, dtype=np.int64)
        self.sag_seconds: Ints = np.zeros(width, dtype=np.int64)
        self.ttft = _Values()
        self.latency = _Values()

    @property
    def retries_measured(self) -> bool:
        """docs/metrics.md#retries: a resend count or an explicit call id somewhere."""
        return self.resend_counts or self.explicit_call_ids

    def add(self, chunk: SealChunk) -> None:
        """Fold one chunk (chunks come in minute order and cover the run's minutes)."""
        events = chunk.events
        # An attempt without a resend count takes its place in its call (docs/metrics.md).
        figure_events = events.with_columns(
            resend_count=pl.coalesce("resend_count", pl.Series(chunk.call_position))
        )
        arrays = event_arrays(figure_events, explicit=True)
        grid = chunk_grid(events, self.shard_ids, chunk.low_ns, chunk.minute_count)
        self._sums(chunk, arrays.ok, grid)
        # Shard rows only for the cells events end in (and, below, those with something
        # in flight or queued); whole-run rows for every minute of the chunk. A chunk
        # whose grid is small next to its events takes every cell (cheaper than finding
        # the occupied ones); its empty shard rows are dropped by _table.
        sparse = grid.shard_count * grid.minute_count > DENSE_CELLS_PER_EVENT * events.height
        occupied = occupied_cells(grid) if sparse else None
        ttft, latency = event_value_groups(grid, arrays, occupied)
        measured = replace(arrays, retries_measured=True)
        cells = cell_figures(grid, measured, ttft, latency, occupied)
        self.ttft.add(ttft.by_minute)
        self.latency.add(latency.by_minute)
        self.shard_tokens += cells.shard_tokens
        self.successes += int(arrays.ok.sum())
        self.retries += int(arrays.retry.sum())
        self.prompt += int(arrays.prompt.sum())
        self.completion += int(arrays.completion.sum())
        concurrency = self._concurrency(chunk, grid)
        rows = cells.rows.join(
            concurrency, on=["shard_id", "minute_ns"], how="full", coalesce=True
        ).with_columns(pl.col(EMPTY_COUNTS).fill_null(0))
        self.rows.append(rows)
        self.first_chunk = False

    def _sums(self, chunk: SealChunk, ok: npt.NDArray[np.bool_], grid: EventGrid) -> None:
        """What the chunk adds to the run's counts, calls, causes and run-wide flags
        (``grid``: the chunk's events')."""
        events = chunk.events
        if events.height == 0:
            return
        last = chunk.call_last
        self.attempts += events.height
        ends = events.get_column("end_ns")
        low, high = int(ends.min()), int(ends.max())  # type: ignore[arg-type]
        self.first_ns = low if self.first_ns is None else min(self.first_ns, low)
        self.last_ns = high if self.last_ns is None else max(self.last_ns, high)
        flags = events.select(
            explicit=(pl.col("call_id") != pl.col("span_id")).any(),
            resend=pl.col("resend_count").is_not_null().any(),
        ).row(0)
        self.explicit_call_ids |= bool(flags[0])
        self.resend_counts |= bool(flags[1])
        self.calls += int(last.sum())
        self.ok_calls += int((last & ok).sum())
        retried = events.get_column("error_type").filter(pl.Series(~last & ~ok))
        causes = retried.fill_null("error").value_counts()
        self.causes.update(dict(causes.iter_rows()))
        reported = events.get_column("queue_wait_s").is_not_null().to_numpy()
        reporting = np.bincount(grid.shard_codes[reported], minlength=grid.shard_count)
        self.queue_shards.update(self.shard_ids[i] for i in np.flatnonzero(reporting))

    def _concurrency(self, chunk: SealChunk, grid: EventGrid) -> pl.DataFrame:
        """In-flight and queue depth of the chunk's minutes (and, for the first chunk, the
        queue and sag seconds before the run's first minute); ``grid``: the chunk's events'."""
        both = chunk.with_reach()
        if chunk.reach.height:
            grid = chunk_grid(both, self.shard_ids, chunk.low_ns, chunk.minute_count)
        series = second_series(both, grid, window=(chunk.low_ns, chunk.minute_count))
        cells = minute_cells(series, self.context.caps)
        self.queue_seconds += cells.queue_seconds
        self.sag_seconds += cells.sag_seconds
        if self.first_chunk:
            # The seconds before the run's first minute (attempts queued or running before
            # any ended) count for the work-conserving check too: totals only, since they
            # can span years.
            queued, sag = seconds_before(series, chunk.low_ns // SECOND_NS, self.context.caps)
            self.queue_seconds += queued
            self.sag_seconds += sag
        names = pl.Series([*self.shard_ids, WHOLE_RUN], dtype=pl.String)
        frame = pl.DataFrame(
            {
                "shard_id": names.gather(cells.row),
                "minute_ns": cells.minute_ns,
                "in_flight_mean": cells.in_flight_mean,
                "in_flight_max": cells.in_flight_max,
                "queue_depth_mean": cells.queue_depth_mean,
                "queue_depth_max": cells.queue_depth_max,
            },
            schema_overrides={
                "shard_id": pl.String,
                "minute_ns": pl.Int64,
                "in_flight_mean": pl.Float64,
                "in_flight_max": pl.Int64,
                "queue_depth_mean": pl.Float64,
                "queue_depth_max": pl.Int64,
            },
        )
        return frame.filter(pl.col("minute_ns") >= chunk.low_ns)

    def _work_conserving(self) -> dict[str, object]:
        caps = self.context.caps
        usable = [
            row
            for row, shard in enumerate(self.shard_ids)
            if shard in self.queue_shards and caps.get(shard)
        ]
        if not usable:
            return work_conserving_result()
        return work_conserving_result(
            int(self.queue_seconds[usable].sum()), int(self.sag_seconds[usable].sum())
        )

    def _table(self) -> pl.DataFrame:
        table = pl.concat(self.rows, how="vertical_relaxed")
        self.rows = []
        called = (
            table.filter(pl.col("shard_id") != WHOLE_RUN)
            .group_by("shard_id")
            .agg(pl.col("calls_in_minute").sum())
            .filter(pl.col("calls_in_minute") > 0)
            .get_column("shard_id")
        )
        active = table.filter(
            (pl.col("shard_id") == WHOLE_RUN) & (pl.col("calls_in_minute") > 0)
        ).get_column("minute_ns")
        first, last = active.min(), active.max()
        table = table.filter(
            (pl.col("shard_id").is_in(called.implode()) | (pl.col("shard_id") == WHOLE_RUN))
            & pl.col("minute_ns").is_between(first, last)
        )
        caps = dict(self.context.caps)
        caps_by_row = {**caps, WHOLE_RUN: sum(caps.values()) if caps else None}
        queue_rows = [*self.queue_shards, *([WHOLE_RUN] if self.queue_shards else [])]
        has_queue = pl.col("shard_id").is_in(queue_rows)
        measured = self.retries_measured
        table = table.with_columns(
            pl.col("in_flight_mean").fill_null(0.0),
            pl.col("in_flight_max").fill_null(0).cast(pl.Int32),
            pl.when(has_queue).then(pl.col("queue_depth_mean").fill_null(0.0)),
            pl.when(has_queue).then(pl.col("queue_depth_max").fill_null(0).cast(pl.Int32)),
            pl.col("retries") if measured else pl.lit(None, dtype=pl.Int64).alias("retries"),
            pl.col("shard_id")
            .replace_strict(caps_by_row, default=None, return_dtype=pl.Int32)
            .alias("concurrency_cap"),
        ).with_columns(rate_columns())
        # A shard's minute where nothing ended, ran or waited is implicit (empty):
        # docs/metrics.md#minute-table.
        table = table.filter(carries_figures())
        table = table.sort("shard_id", "minute_ns").select(_TABLE_COLUMNS)
        floats = [n for n, t in table.schema.items() if t == pl.Float64]
        return table.with_columns(pl.col(floats).round_sig_figs(SIGNIFICANT_DIGITS))

    def finish(self) -> RunAnalysis:
        """The minute table (``minute_ns``) and run figures of everything added."""
        table = self._table()
        kept = [i for i, s in enumerate(self.shard_ids) if s in set(table["shard_id"])]
        explicit = self.explicit_call_ids
        causes = dict(sorted(self.causes.items())) if self.retries_measured else None
        calls = (
            (self.calls, self.ok_calls, causes)
            if explicit
            else (self.attempts, self.successes, None)
        )
        values = run_values(
            self.ttft.groups(np.float64, None), self.latency.groups(np.int64, latency_seconds)
        )
        totals = RunTotals(
            run_id=self.context.run_id,
            attempts=self.attempts,
            first_ns=self.first_ns,
            last_ns=self.last_ns,
            successes=self.successes,
            retries=self.retries,
            prompt=self.prompt,
            completion=self.completion,
            retries_measured=self.retries_measured,
            calls=calls,
            values=values,
            shard_ids=tuple(self.shard_ids[i] for i in kept),
            shard_tokens=self.shard_tokens[kept],
            work_conserving=self._work_conserving(),
        )
        return RunAnalysis(table, run_figures_of(table, totals, self.context))
