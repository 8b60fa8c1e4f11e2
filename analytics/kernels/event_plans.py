"""Lazy Polars plans over canonical events (docs/metrics.md). Plans are built here, collected
elsewhere.

Every plan takes a frame with exactly the canonical event columns
(:data:`provenance.event_file.EVENT_SCHEMA`), so every figure can be recomputed from
``events.jsonl`` alone.

Retries (docs/metrics.md honesty rule) are *measured* iff some event carries ``resend_count`` or a
``call_id`` different from its ``span_id`` (an explicit ``tpmledger.call.id``). An attempt
is a retry when its resend count is > 0; an attempt without ``resend_count`` takes its
position within its logical call, ordered by (start_ns, end_ns, span_id, trace_id), as its count
(0 for the first attempt, which is also what an absent ``resend_count`` means alone).
"""

from __future__ import annotations

from typing import Literal

import polars as pl

from tpmledger.analytics.kernels.figure_registry import figure
from tpmledger.durations import MINUTE_NS, SECOND_NS

QUANTILE_METHOD: Literal["linear"] = "linear"

OK = pl.col("status") == "ok"
#: How a logical call's attempts are ordered (docs/metrics.md#logical-calls).
CALL_ORDER = ("start_ns", "end_ns", "span_id", "trace_id")


def explicit_call_ids(events: pl.DataFrame) -> bool:
    """True when some event's call_id was set explicitly (differs from its span id)."""
    differs = (pl.col("call_id") != pl.col("span_id")).any()
    # Runs with explicit ids usually show one in their first rows: look there first.
    for rows in (events.head(1024), events):
        if rows.height and bool(rows.select(differs).item()):
            return True
    return False


def retries_measured(events: pl.DataFrame, *, explicit: bool | None = None) -> bool:
    """True when the events can support a retry figure (see the module docstring).

    ``explicit`` is :func:`explicit_call_ids` of ``events`` when the caller has it.
    """
    if events.height == 0:
        return False
    if events.get_column("resend_count").null_count() < events.height:
        return True
    return explicit if explicit is not None else explicit_call_ids(events)


def attempt_order() -> pl.Expr:
    """0-based position of each attempt within its call by (start_ns, end_ns, span_id,
    trace_id): the trace id settles attempts that share the rest (as the event file's order
    does for an offline verifier)."""
    return pl.struct(*CALL_ORDER).rank("ordinal").over("call_id").cast(pl.Int64) - 1


def prepared(events: pl.LazyFrame, *, measured: bool, all_resend_known: bool) -> pl.LazyFrame:
    """Events with the derived columns every aggregation uses.

    ``minute_ns`` (UTC minute of the end time), ``ok``, token counts with absent = 0,
    ``latency_s``, ``ttft_ok_s`` (TTFT of successful attempts only) and ``is_retry``
    (null when retries are not measured).
    """
    if not measured:
        retry = pl.lit(None, dtype=pl.Boolean)
    elif all_resend_known:
        retry = pl.col("resend_count") > 0
    else:
        retry = pl.coalesce(pl.col("resend_count"), attempt_order()) > 0
    return events.with_columns(
        minute_ns=(pl.col("end_ns") // MINUTE_NS) * MINUTE_NS,
        ok=OK,
        prompt=pl.col("prompt_tokens").fill_null(0),
        completion=pl.col("completion_tokens").fill_null(0),
        latency_s=(pl.col("end_ns") - pl.col("start_ns")) / SECOND_NS,
        ttft_ok_s=pl.when(OK).then(pl.col("ttft_s")),
        is_retry=retry,
    )


def prepared_events(
    events: pl.DataFrame, *, explicit: bool | None = None
) -> tuple[pl.LazyFrame, bool]:
    """The prepared lazy plan over ``events`` and whether retries are measured."""
    measured = retries_measured(events, explicit=explicit)
    all_known = events.get_column("resend_count").null_count() == 0
    return prepared(events.lazy(), measured=measured, all_resend_known=all_known), measured


@figure("minute_counts")
def derived_counts() -> list[pl.Expr]:
    """A minute's counts that follow from others: total tokens and failed attempts."""
    return [
        (pl.col("prompt_tpm_in") + pl.col("completion_tpm_out")).alias("tpm_total"),
        (pl.col("calls_in_minute") - pl.col("successes")).alias("failures"),
    ]


@figure("minute_rates")
def rate_columns() -> list[pl.Expr]:
    """Rates as fractions; null for a minute with no calls (nothing to divide)."""
    calls = pl.col("calls_in_minute")
    return [
        pl.when(calls > 0).then(pl.col("retries") / calls).alias("retry_rate"),
        pl.when(calls > 0).then(pl.col("successes") / calls).alias("success_rate"),
    ]
