"""Run-level figures (docs/metrics.md, named as docs/metrics.md ``GET /v1/runs/{run_id}``):
the run object assembled from a minute table and a run's totals.

The streaming seal (:mod:`tpmledger.analytics.seal.run_stream`) builds the table and the
:class:`RunTotals` and :func:`run_figures_of` assembles the figures. The optional
:class:`RunContext` carries what the event file does not (declared shard count, caps,
sweep); figures that need it (``work_conserving``, ``concurrency_cap``, …) are null
without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from tpmledger.analytics.kernels.cell_figures import (
    WHOLE_RUN,
)
from tpmledger.analytics.kernels.figure_rules import clean
from tpmledger.analytics.kernels.run_level import (
    PEAK_FIELDS,
    peak_minute,
    ratio,
    shard_balance,
    sustained_tpm_total,
)
from tpmledger.storage.codecs.time_text import minute_text_ns, ns_to_rfc3339


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


@dataclass(frozen=True)
class RunTotals:
    """What the run figures are assembled from besides the minute table: sums over every
    event, logical calls, run-level percentiles and moments, per-shard tokens and the
    work-conserving check, as the streaming seal (:mod:`analytics.seal.run_stream`) sums
    them (the whole-run test oracle builds one too); :func:`run_figures_of` is shared."""

    run_id: str | None
    attempts: int
    first_ns: int | None
    last_ns: int | None
    successes: int
    retries: int
    prompt: int
    completion: int
    retries_measured: bool
    calls: tuple[int, int, Any]  # logical calls, those that succeeded, retry causes
    values: dict[str, float | None]  # run-level percentiles and moments (run_values)
    shard_ids: tuple[str, ...]  # shards with events, sorted
    shard_tokens: npt.NDArray[np.int64]  # prompt + completion per shard of shard_ids
    work_conserving: dict[str, Any]


def run_figures_of(table: pl.DataFrame, t: RunTotals, context: RunContext) -> dict[str, Any]:
    """The run object (docs/metrics.md) from the minute table (``minute_ns``) and totals."""
    calls, ok_calls, causes = t.calls
    v = t.values
    whole = (
        table.filter(pl.col("shard_id") == WHOLE_RUN)
        .sort("minute_ns")
        .select("minute_ns", "shards_active", *PEAK_FIELDS)
        .to_dicts()
    )
    figures: dict[str, Any] = {
        "run_id": t.run_id,
        "attempts": t.attempts,
        "logical_calls": calls,
        "shard_count": len(t.shard_ids),
        "first_event_utc": ns_to_rfc3339(t.first_ns),
        "last_event_utc": ns_to_rfc3339(t.last_ns),
        "active_minutes": sum(1 for r in whole if r["calls_in_minute"] > 0),
        "peak_minute": peak_minute(whole, "tpm_total", "minute_ns", minute_text_ns),
        "peak_completion_minute": peak_minute(
            whole, "completion_tpm_out", "minute_ns", minute_text_ns
        ),
        "sustained_tpm_total": sustained_tpm_total([r["tpm_total"] for r in whole[1:-1]]),
        "attempt_success_rate": ratio(t.successes, t.attempts),
        "call_success_rate": ratio(ok_calls, calls),
        "retry_rate": ratio(t.retries, t.attempts) if t.retries_measured else None,
        "retry_causes": causes,
        "ttft_s": {
            "p50": v["ttft_p50"],
            "p95": v["ttft_p95"],
            "p99": v["ttft_p99"],
            "mean": v["ttft_mean"],
            "variance": v["ttft_var"],
        },
        "shard_balance": shard_balance(
            dict(zip(t.shard_ids, t.shard_tokens.tolist(), strict=True))
        ),
        "declared_shard_count": context.declared_shard_count,
        "concurrency_cap": context.concurrency_cap,
        "sweep_id": context.sweep_id,
        "work_conserving": t.work_conserving,
        "tokens": {
            "prompt": t.prompt,
            "completion": t.completion,
            "total": t.prompt + t.completion,
        },
        "latency_s": {
            "p50": v["lat_p50"],
            "p95": v["lat_p95"],
            "p99": v["lat_p99"],
            "mean": v["lat_mean"],
        },
    }
    cleaned: dict[str, Any] = clean(figures)
    return cleaned
