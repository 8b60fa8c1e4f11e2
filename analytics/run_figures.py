"""Run-level figures (SPEC §4, named as SPEC §8 ``GET /v1/runs/{run_id}``) from events alone.

:func:`compute_run_figures` takes a frame with exactly the canonical event columns, so a
signed summary can be re-verified from ``events.jsonl``. The optional :class:`RunContext`
carries what the event file does not (declared shard count, caps, sweep); figures that
need it (``work_conserving``, ``concurrency_cap``, …) are null without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from analytics.concurrency import SecondSeries, second_series, work_conserving
from analytics.event_grid import EventGrid, event_grid
from analytics.event_plans import explicit_call_ids
from analytics.logical_calls import call_queries, flag_repeated_calls, logical_calls
from analytics.minute_percentiles import (
    RankedEvents,
    minute_percentiles,
    rank_events,
    run_percentiles,
)
from analytics.minute_table import (
    WHOLE_RUN,
    build_minute_table,
    minute_utc,
    prepared_events,
)
from storage.runs_read import ns_to_rfc3339

SIGNIFICANT_DIGITS = 12
PEAK_FIELDS = ("calls_in_minute", "completion_tpm_out", "prompt_tpm_in", "tpm_total")


@dataclass(frozen=True)
class RunContext:
    """Run facts that are not in the event file (from the ``attempts``/``runs`` rows)."""

    run_id: str | None = None
    caps: Mapping[str, int] = field(default_factory=dict)  # shard_id -> concurrency cap
    declared_shard_count: int | None = None
    concurrency_cap: int | None = None
    sweep_id: str | None = None


@dataclass(frozen=True)
class RunAnalysis:
    """Everything computed for one run: the minute table (with ``minute_ns``) and figures."""

    minutes: pl.DataFrame
    figures: dict[str, Any]


def clean(value: Any) -> Any:
    """Floats rounded to 12 significant digits (stable across summation orders)."""
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    return value


def _ratio(part: int | None, whole: int | None) -> float | None:
    if part is None or not whole:
        return None
    return part / whole


def _peak(whole: pl.DataFrame, by: str) -> dict[str, Any] | None:
    active = whole.filter(pl.col("calls_in_minute") > 0)
    if active.height == 0:
        return None
    # Ties go to the earliest minute (SPEC §4).
    row = active.sort([by, "minute_ns"], descending=[True, False]).row(0, named=True)
    return {
        "minute_utc": minute_utc(row["minute_ns"]),
        "shard_count": row["shards_active"],
        **{name: row[name] for name in PEAK_FIELDS},
    }


def _totals(plan: pl.LazyFrame) -> pl.LazyFrame:
    ttft, latency = pl.col("ttft_ok_s"), pl.col("latency_s")
    return plan.select(
        attempts=pl.len(),
        shard_count=pl.col("shard_id").n_unique(),
        first_ns=pl.col("end_ns").min(),
        last_ns=pl.col("end_ns").max(),
        successes=pl.col("ok").sum(),
        retries=pl.col("is_retry").sum(),
        prompt=pl.col("prompt").sum(),
        completion=pl.col("completion").sum(),
        ttft_n=ttft.count(),
        ttft_mean=ttft.mean(),
        ttft_var=ttft.var(ddof=0),
        lat_mean=latency.mean(),
    )


def _balance_query(plan: pl.LazyFrame) -> pl.LazyFrame:
    return plan.group_by("shard_id").agg(tokens=pl.col("prompt").sum() + pl.col("completion").sum())


def _shard_balance(shares: pl.DataFrame) -> dict[str, Any]:
    shares = shares.sort("shard_id")
    total = int(shares.get_column("tokens").sum()) if shares.height else 0
    if total == 0:
        return {"shares": None, "imbalance": None}
    share = {s: t / total for s, t in shares.iter_rows()}
    mean = 1 / len(share)
    return {"shares": share, "imbalance": max(share.values()) / mean}


def _sustained(whole: pl.DataFrame) -> float | None:
    # Median tpm_total over minutes strictly between the first and the last minute.
    inner = whole.get_column("tpm_total").slice(1, max(whole.height - 2, 0))
    value = inner.median() if inner.len() else None
    return float(value) if value is not None else None  # type: ignore[arg-type]


@dataclass(frozen=True)
class _EventTotals:
    """Run figures that need only the events (not the minute table or percentiles)."""

    sums: dict[str, Any]
    calls: tuple[int, int, Any]
    balance: dict[str, Any]
    measured: bool


def _event_totals(events: pl.DataFrame) -> _EventTotals:
    """Totals, shard balance and logical calls: one collect over the prepared events."""
    plan, measured = prepared_events(events)
    explicit = explicit_call_ids(events)
    if explicit:
        plan = flag_repeated_calls(plan, events.get_column("call_id"))
    plan = plan.cache()
    totals, balance, *calls = pl.collect_all(
        [_totals(plan), _balance_query(plan), *call_queries(plan, explicit)]
    )
    return _EventTotals(
        totals.row(0, named=True),
        logical_calls(calls, measured),
        _shard_balance(balance),
        measured,
    )


def _figures(
    events: pl.DataFrame,
    table: pl.DataFrame,
    series: SecondSeries,
    context: RunContext,
    ranked: RankedEvents,
    totals: _EventTotals,
) -> dict[str, Any]:
    t = totals.sums | run_percentiles(ranked)
    calls, ok_calls, causes = totals.calls
    measured = totals.measured
    whole = table.filter(pl.col("shard_id") == WHOLE_RUN).sort("minute_ns")
    run_ids = events.get_column("run_id").unique().to_list()
    ttft_measured = bool(t["ttft_n"])
    figures: dict[str, Any] = {
        "run_id": context.run_id or (run_ids[0] if run_ids else None),
        "attempts": t["attempts"],
        "logical_calls": calls,
        "shard_count": t["shard_count"],
        "first_event_utc": ns_to_rfc3339(t["first_ns"]),
        "last_event_utc": ns_to_rfc3339(t["last_ns"]),
        "active_minutes": whole.filter(pl.col("calls_in_minute") > 0).height,
        "peak_minute": _peak(whole, "tpm_total"),
        "peak_completion_minute": _peak(whole, "completion_tpm_out"),
        "sustained_tpm_total": _sustained(whole),
        "attempt_success_rate": _ratio(t["successes"], t["attempts"]),
        "call_success_rate": _ratio(ok_calls, calls),
        "retry_rate": _ratio(t["retries"], t["attempts"]) if measured else None,
        "retry_causes": causes,
        "ttft_s": {
            "p50": t["ttft_p50"],
            "p95": t["ttft_p95"],
            "p99": t["ttft_p99"],
            "mean": t["ttft_mean"],
            "variance": t["ttft_var"] if ttft_measured else None,
        },
        "shard_balance": totals.balance,
        "declared_shard_count": context.declared_shard_count,
        "concurrency_cap": context.concurrency_cap,
        "sweep_id": context.sweep_id,
        "work_conserving": work_conserving(series, context.caps),
        "tokens": {
            "prompt": t["prompt"] or 0,
            "completion": t["completion"] or 0,
            "total": (t["prompt"] or 0) + (t["completion"] or 0),
        },
        "latency_s": {
            "p50": t["lat_p50"],
            "p95": t["lat_p95"],
            "p99": t["lat_p99"],
            "mean": t["lat_mean"],
        },
    }
    cleaned: dict[str, Any] = clean(figures)
    return cleaned


def _ranked_percentiles(events: pl.DataFrame, grid: EventGrid) -> tuple[RankedEvents, pl.DataFrame]:
    ranked = rank_events(events)
    return ranked, minute_percentiles(grid, ranked)


def analyze_events(events: pl.DataFrame, context: RunContext | None = None) -> RunAnalysis:
    """Minute table and run figures of canonical ``events`` (any row order).

    NumPy's sorts release the GIL, so the percentiles are ranked and sorted in a worker
    thread while this thread computes the concurrency series and the event totals
    (Polars); the minute table then joins both.
    """
    context = context or RunContext()
    grid = event_grid(events)
    with ThreadPoolExecutor(max_workers=1) as pool:
        percentiles = pool.submit(_ranked_percentiles, events, grid)
        series = second_series(events, grid)
        totals = _event_totals(events)
        ranked, minute_pct = percentiles.result()
    table = build_minute_table(
        events, context.caps, series, grid=grid, ranked=ranked, percentiles=minute_pct
    )
    return RunAnalysis(table, _figures(events, table, series, context, ranked, totals))


def compute_run_figures(events: pl.DataFrame, context: RunContext | None = None) -> dict[str, Any]:
    """Run-level figures from canonical events (the §8 run object without seal keys)."""
    return analyze_events(events, context).figures
