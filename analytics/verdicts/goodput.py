"""Goodput (docs/metrics.md#goodput): the tokens and calls of attempts that met every SLO.

The figure benchmark tools pair with throughput (DistServe's goodput, vLLM's
``--goodput``, GenAI-Perf's ``goodput``). An attempt is **good** when it succeeded and
meets every declared limit: its TTFT (a limit on TTFT is missed by an attempt that reports
none) and its latency (end − start). Per minute (UTC minute of the end time, like the
minute table): ``goodput_tpm_total`` = prompt + completion tokens of good attempts,
``good_calls`` and ``calls``. Per run: ``goodput_tpm_total`` = the median over minutes
strictly between the first and last (as sustained TPM), ``good_call_share`` = good
attempts / attempts.

Computed from a run's canonical events when a version is sealed and stored with it; when
the SLO limits TTFT and no attempt of the run reports TTFT, goodput is not measured
(``null``), never 0.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tpmledger.analytics.kernels.figure_rules import clean
from tpmledger.analytics.kernels.run_level import ratio, sustained_tpm_total
from tpmledger.durations import MINUTE_NS
from tpmledger.slo import Slo
from tpmledger.storage.codecs.time_text import minute_text_ns


def _good(slo: Slo) -> pl.Expr:
    good = pl.col("status") == "ok"
    if slo.ttft_s is not None:
        good = good & pl.col("ttft_s").is_not_null() & (pl.col("ttft_s") <= slo.ttft_s)
    if slo.latency_s is not None:
        # Times the reciprocal, as Polars divides a column of several values by 1e9; it
        # divides a lone value exactly, and a seal's chunk may hold one attempt (the last
        # bit decides a limit met exactly; analytics/kernels/event_arrays.py).
        latency_s = (pl.col("end_ns") - pl.col("start_ns")) * (1 / 1e9)
        good = good & (latency_s <= slo.latency_s)
    return good


def _not_measured(slo: Slo, reason: str) -> dict[str, Any]:
    return {
        "slo": slo.as_dict(),
        "slo_text": slo.text,
        "goodput_tpm_total": None,
        "good_call_share": None,
        "good_calls": None,
        "calls": None,
        "not_measured_because": reason,
        "minutes": [],
    }


def goodput_minutes(events: pl.DataFrame, slo: Slo) -> pl.DataFrame:
    """``minute_ns``, ``goodput_tpm_total``, ``good_calls``, ``calls`` of each minute in
    which an attempt of ``events`` ended (any slice of the run's attempts)."""
    tokens = pl.col("prompt_tokens").fill_null(0) + pl.col("completion_tokens").fill_null(0)
    return (
        events.lazy()
        .with_columns(good=_good(slo), minute_ns=pl.col("end_ns") - pl.col("end_ns") % MINUTE_NS)
        .group_by("minute_ns")
        .agg(
            goodput_tpm_total=pl.when(pl.col("good")).then(tokens).otherwise(0).sum(),
            good_calls=pl.col("good").sum(),
            calls=pl.len(),
        )
        .collect()
    )


def goodput_figures(
    slo: Slo, per_minute: pl.DataFrame, *, attempts: int, reports_ttft: bool
) -> dict[str, Any]:
    """Run-level figures and the series from the run's :func:`goodput_minutes`, its
    ``attempts`` and whether any of them ``reports_ttft``."""
    if attempts == 0:
        return _not_measured(slo, "the run has no attempts")
    if slo.ttft_s is not None and not reports_ttft:
        return _not_measured(slo, "the SLO limits TTFT and no attempt of the run reports TTFT")
    first, last = int(per_minute["minute_ns"].min()), int(per_minute["minute_ns"].max())  # type: ignore[arg-type]
    by_minute = {int(r[0]): r for r in per_minute.iter_rows()}
    minutes: list[dict[str, Any]] = []
    for minute_ns in range(first, last + MINUTE_NS, MINUTE_NS):  # empty minutes included
        row = by_minute.get(minute_ns)
        minutes.append(
            {
                "minute_utc": minute_text_ns(minute_ns),
                "goodput_tpm_total": int(row[1]) if row else 0,
                "good_calls": int(row[2]) if row else 0,
                "calls": int(row[3]) if row else 0,
            }
        )
    inner = [int(m["goodput_tpm_total"]) for m in minutes[1:-1]]
    good_calls = sum(int(m["good_calls"]) for m in minutes)
    figures: dict[str, Any] = {
        "slo": slo.as_dict(),
        "slo_text": slo.text,
        "goodput_tpm_total": sustained_tpm_total(inner),  # the sustained TPM's formula
        "good_call_share": ratio(good_calls, attempts),
        "good_calls": good_calls,
        "calls": attempts,
        "not_measured_because": None if inner else "fewer than 3 minutes: no inner minute",
    }
    cleaned: dict[str, Any] = clean(figures)
    cleaned["minutes"] = minutes
    return cleaned


def compute_goodput(events: pl.DataFrame, slo: Slo) -> dict[str, Any]:
    """Run-level goodput figures and the per-minute series of ``events`` under ``slo``."""
    reports_ttft = events.get_column("ttft_s").null_count() < events.height
    return goodput_figures(
        slo, goodput_minutes(events, slo), attempts=events.height, reports_ttft=reports_ttft
    )
