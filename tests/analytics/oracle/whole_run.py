"""The whole-run pass: a run's minute table and figures computed from all its canonical
events at once, the reference the streaming seal
(:class:`tpmledger.analytics.seal.run_stream.RunStream`) is held equal to.

The product computes every figure one way, by the stream; this pass reaches the same
figures by a different route (one grid over the whole run, logical calls grouped by a
hash of the call id, concurrency sampled over the run's whole window) and so checks it:
tests/analytics/seal/test_run_stream.py compares them row for row and figure for figure.
It shares with the product only the pieces both assemble from (kernels, the figure
rules, :func:`run_figures_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
import numpy.typing as npt
import polars as pl

from tests.analytics.oracle.minute_samples import minute_samples
from tpmledger.analytics.kernels.cell_figures import (
    CellFigures,
    cell_figures,
    event_value_groups,
    run_values,
)
from tpmledger.analytics.kernels.concurrency import SecondSeries, second_series
from tpmledger.analytics.kernels.event_arrays import EventArrays, event_arrays
from tpmledger.analytics.kernels.event_grid import EventGrid, event_grid
from tpmledger.analytics.kernels.event_plans import CALL_ORDER, explicit_call_ids, rate_columns
from tpmledger.analytics.kernels.figure_rules import (
    SAG_FRACTION_OF_CAP,
    SIGNIFICANT_DIGITS,
    work_conserving_result,
)
from tpmledger.analytics.kernels.logical_calls import repeated
from tpmledger.analytics.kernels.minute_table import MINUTE_COLUMNS, with_minute_utc
from tpmledger.analytics.kernels.run_figures import (
    RunAnalysis,
    RunContext,
    RunTotals,
    run_figures_of,
)
from tpmledger.storage.schema.minute_keys import WHOLE_RUN

# --- logical calls -------------------------------------------------------------------------


def count_logical_calls(
    events: pl.DataFrame, ok: npt.NDArray[np.bool_], *, explicit: bool, measured: bool
) -> tuple[int, int, Any]:
    """(logical calls, calls whose last attempt succeeded, retry causes or None).

    ``ok`` flags successful attempts, per row of ``events``. Without an ``explicit``
    call id every attempt is its own logical call and causes cannot be linked to a
    retry. Otherwise only the calls whose id hash repeats are grouped: the last attempt
    of a call is the latest by (start_ns, end_ns, span_id, trace_id), and the causes are the
    error types of the failed attempts before it (without one: ``"error"``), when retries
    are ``measured``. A hash collision only sends one-attempt calls down the exact path.
    """
    if not explicit:
        return events.height, int(ok.sum()), None
    many = repeated(events.get_column("call_id").hash().to_numpy())
    single = ~many
    n_single, ok_single = int(single.sum()), int((ok & single).sum())
    order = list(CALL_ORDER)
    attempt_ok = pl.col("ok")
    failed_type = pl.when(~attempt_ok).then(pl.col("error_type").fill_null("error"))
    multi = (
        events.select("call_id", *order, "error_type")
        .with_columns(ok=pl.Series(ok))
        .filter(pl.Series(many))
        .sort(["call_id", *order], maintain_order=True)
        .group_by("call_id", maintain_order=True)
        .agg(last_ok=attempt_ok.last(), retried=failed_type.head(pl.len() - 1))
    )
    calls = n_single + multi.height
    ok_calls = ok_single + int(multi.get_column("last_ok").sum())
    if not measured:
        return calls, ok_calls, None
    causes = (
        multi.select(pl.col("retried").explode().drop_nulls())
        .group_by("retried")
        .len()
        .sort("retried")
    )
    return calls, ok_calls, {r: int(n) for r, n in causes.iter_rows()}


# --- concurrency over the whole run's window -----------------------------------------------


def minute_concurrency(series: SecondSeries, caps: Mapping[str, int] | None) -> pl.DataFrame:
    """Per (shard_id or '*', window minute): in-flight and queue depth mean/max, and the cap."""
    samples = minute_samples(series, {})
    queue_rows = np.array([s in series.queue_shards for s in series.shard_ids], dtype=np.bool_)
    shard_ids = [*series.shard_ids, WHOLE_RUN]
    minutes = series.window_minutes
    cap_map = dict(caps or {})
    caps_by_row = {**cap_map, WHOLE_RUN: sum(cap_map.values()) if cap_map else None}
    # Shards that never reported a queue wait have depth 0 throughout, so the '*' row's
    # depth is the sum over reporting shards; it is null when none reported.
    has_queue = np.append(queue_rows, bool(series.queue_shards)).repeat(minutes)
    frame = pl.DataFrame(
        {
            "shard_id": np.repeat(np.array(shard_ids, dtype=object), minutes).tolist(),
            "minute_ns": np.tile(samples.minute_ns, len(shard_ids)),
            "in_flight_mean": samples.in_flight_mean.ravel(),
            "in_flight_max": samples.in_flight_max.ravel(),
            "queue_depth_mean": samples.queue_depth_mean.ravel(),
            "queue_depth_max": samples.queue_depth_max.ravel(),
            "has_queue": has_queue,
        },
        schema_overrides={"shard_id": pl.String, "minute_ns": pl.Int64},
    )
    queue = pl.col("has_queue")
    return frame.select(
        "shard_id",
        "minute_ns",
        "in_flight_mean",
        pl.col("in_flight_max").cast(pl.Int32),
        pl.when(queue).then(pl.col("queue_depth_mean")).alias("queue_depth_mean"),
        pl.when(queue).then(pl.col("queue_depth_max").cast(pl.Int32)).alias("queue_depth_max"),
        pl.col("shard_id")
        .replace_strict(caps_by_row, default=None, return_dtype=pl.Int32)
        .alias("concurrency_cap"),
    )


Ints = npt.NDArray[np.int64]


@numba.njit(nogil=True)  # type: ignore[misc]
def run_totals(
    offsets: Ints,
    run_start: Ints,
    run_flight: Ints,
    run_depth: Ints,
    last: int,
    low: npt.NDArray[np.float64],
) -> tuple[Ints, Ints]:
    """Per row over the whole grid: seconds with a queue, and those with in-flight <
    ``low[row]`` as well (the work-conserving check's counts)."""
    rows = offsets.size - 1
    queued = np.zeros(rows, np.int64)
    sag = np.zeros(rows, np.int64)
    for row in range(rows):
        for k in range(offsets[row], offsets[row + 1]):
            if run_depth[k] <= 0:
                continue
            end = run_start[k + 1] if k + 1 < offsets[row + 1] else last
            queued[row] += end - run_start[k]
            if run_flight[k] < low[row]:
                sag[row] += end - run_start[k]
    return queued, sag


def work_conserving(series: SecondSeries, caps: Mapping[str, int] | None) -> dict[str, Any]:
    """The docs/metrics.md work-conserving check; figures are null when they cannot be measured."""
    result = work_conserving_result()
    usable = {s: c for s, c in (caps or {}).items() if s in series.queue_shards and c}
    if not usable:
        return result
    below = [SAG_FRACTION_OF_CAP * float(usable.get(s) or 0) for s in series.shard_ids]
    sag_below = np.array([*below, 0.0], dtype=np.float64)
    queued, sag = run_totals(
        series.offsets,
        series.run_start,
        series.run_in_flight,
        series.run_queue_depth,
        series.last_second,
        sag_below,
    )
    rows = [row for row, shard in enumerate(series.shard_ids) if shard in usable]
    return work_conserving_result(int(queued[rows].sum()), int(sag[rows].sum()))


# --- the minute table -----------------------------------------------------------------------


def _round_floats(frame: pl.DataFrame) -> pl.DataFrame:
    floats = [n for n, t in frame.schema.items() if t == pl.Float64]
    return frame.with_columns(pl.col(floats).round_sig_figs(SIGNIFICANT_DIGITS))


def build_minute_table(
    events: pl.DataFrame,
    caps: Mapping[str, int] | None = None,
    series: SecondSeries | None = None,
    *,
    grid: EventGrid | None = None,
    cells: CellFigures | None = None,
) -> pl.DataFrame:
    """The minute table with ``minute_ns`` (int) in place of ``minute_utc``.

    ``series``, ``grid`` and ``cells`` may be passed in when the caller computed them
    already; they are derived from ``events`` otherwise.
    """
    grid = grid if grid is not None else event_grid(events)
    series = series if series is not None else second_series(events, grid)
    if cells is None:
        arrays = event_arrays(events)
        cells = cell_figures(grid, arrays, *event_value_groups(grid, arrays))
    table = (
        cells.rows.join(minute_concurrency(series, caps), on=["shard_id", "minute_ns"], how="left")
        .with_columns(rate_columns())
        .sort("shard_id", "minute_ns")
    )
    columns = [c if c != "minute_utc" else "minute_ns" for c in MINUTE_COLUMNS]
    return _round_floats(table.select(columns))


def compute_minutes(events: pl.DataFrame, caps: Mapping[str, int] | None = None) -> pl.DataFrame:
    """Minute table of docs/metrics.md from canonical events alone (``caps`` only fills the cap
    column); ``minute_utc`` is a UTC datetime."""
    return with_minute_utc(build_minute_table(events, caps))


# --- run figures ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Parts:
    """What the run figures are assembled from (computed side by side)."""

    grid: EventGrid
    arrays: EventArrays
    cells: CellFigures
    run: dict[str, float | None]  # run-level percentiles and moments
    series: SecondSeries
    calls: tuple[int, int, Any]


def _run_id(events: pl.DataFrame) -> str | None:
    run_ids = events.get_column("run_id").drop_nulls().unique().sort()
    return run_ids[0] if run_ids.len() else None


def _whole_run_totals(events: pl.DataFrame, parts: _Parts, context: RunContext) -> RunTotals:
    first, last = events.select(first=pl.col("end_ns").min(), last=pl.col("end_ns").max()).row(0)
    arrays = parts.arrays
    return RunTotals(
        run_id=context.run_id or _run_id(events),
        attempts=events.height,
        first_ns=first,
        last_ns=last,
        successes=int(arrays.ok.sum()),
        retries=int(arrays.retry.sum()),
        prompt=int(arrays.prompt.sum()),
        completion=int(arrays.completion.sum()),
        retries_measured=arrays.retries_measured,
        calls=parts.calls,
        values=parts.run,
        shard_ids=parts.grid.shard_ids,
        shard_tokens=parts.cells.shard_tokens,
        work_conserving=work_conserving(parts.series, context.caps),
    )


def analyze_events(events: pl.DataFrame, context: RunContext | None = None) -> RunAnalysis:
    """Minute table and run figures of canonical ``events`` (any row order)."""
    context = context or RunContext()
    with ThreadPoolExecutor(max_workers=1) as pool:
        grid_job = pool.submit(event_grid, events)
        series = pool.submit(lambda: second_series(events, grid_job.result()))
        explicit = explicit_call_ids(events)
        arrays = event_arrays(events, explicit=explicit)
        calls = pool.submit(
            count_logical_calls,
            events,
            arrays.ok,
            explicit=explicit,
            measured=arrays.retries_measured,
        )
        grid = grid_job.result()
        ttft, latency = event_value_groups(grid, arrays)
        run = pool.submit(run_values, ttft, latency)
        cells = cell_figures(grid, arrays, ttft, latency)
        table = build_minute_table(events, context.caps, series.result(), grid=grid, cells=cells)
        parts = _Parts(grid, arrays, cells, run.result(), series.result(), calls.result())
    return RunAnalysis(
        table, run_figures_of(table, _whole_run_totals(events, parts, context), context)
    )


def compute_run_figures(events: pl.DataFrame, context: RunContext | None = None) -> dict[str, Any]:
    """Run-level figures from canonical events (the run object without seal keys)."""
    return analyze_events(events, context).figures
