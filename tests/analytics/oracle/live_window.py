"""The live minute rows, facts and extras recomputed from a whole window of attempts: what
the analytics worker did before each live minute kept mergeable state
(:mod:`tpmledger.analytics.live.minute_state`), kept here as the reference that state is
tested against (tests/analytics/live/test_minute_state.py). Each minute's figures depend on
two sets of attempts:

- the attempts *ending* in the minute (counts, tokens, TTFT and latency percentiles);
- the attempts whose queued-to-released interval *overlaps* it (in-flight, queue depth).

Rollups and the retry position of attempts without a resend count depend on other
attempts of the run; the storage probes settle them per attempt (``rollup``,
``later_in_call``), so the figures here are the batch table's exactly
(tests/analytics/live/test_live_minutes.py checks this against the seal's table).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from tests.analytics.oracle.minute_samples import minute_samples
from tpmledger.analytics.kernels.cell_figures import cell_figures, event_value_groups
from tpmledger.analytics.kernels.concurrency import SecondSeries, second_series
from tpmledger.analytics.kernels.event_arrays import event_arrays
from tpmledger.analytics.kernels.event_grid import event_grid
from tpmledger.analytics.kernels.value_sketch import KEY_MULTIPLIER, MIN_MAPPED, summary
from tpmledger.analytics.live.live_row_schema import finished_rows
from tpmledger.analytics.live.minute_state import TOKEN_TYPES
from tpmledger.durations import MINUTE_NS
from tpmledger.provenance.event_file import EVENT_SCHEMA
from tpmledger.storage.schema.minute_keys import WHOLE_RUN


def _canonical(events: pl.DataFrame) -> pl.DataFrame:
    """Canonical event columns, with every resend count known: an attempt without one
    takes 1 when an earlier attempt of its call exists (the probe), else 0."""
    # Columns no minute figure reads are not fetched (storage.writers.live_store): null here.
    absent = [
        pl.lit(None, dtype=dtype).alias(name)
        for name, dtype in EVENT_SCHEMA.items()
        if name not in events.columns
    ]
    return events.with_columns(
        *absent, resend_count=pl.coalesce("resend_count", pl.col("later_in_call"))
    ).select(pl.col(name).cast(dtype) for name, dtype in EVENT_SCHEMA.items())


def _cell_rows(ending: pl.DataFrame) -> pl.DataFrame | None:
    """Event-derived columns of every (shard, minute) and whole-run minute of ``ending``."""
    if ending.height == 0:
        return None
    events = _canonical(ending)
    grid = event_grid(events)
    arrays = event_arrays(events, explicit=True)
    rows = cell_figures(grid, arrays, *event_value_groups(grid, arrays)).rows
    extras = ending.select(
        "shard_id",
        minute_ns=(pl.col("end_ns") // MINUTE_NS) * MINUTE_NS,
        queue_reported=pl.col("queue_wait_s").is_not_null(),
        evidence=pl.col("resend_count").is_not_null() | (pl.col("call_id_explicit") == 1),
    )
    per_shard = extras.group_by("shard_id", "minute_ns").agg(
        queue_reports=pl.col("queue_reported").sum(), retry_evidence=pl.col("evidence").any()
    )
    whole = extras.group_by("minute_ns").agg(
        queue_reports=pl.col("queue_reported").sum(), retry_evidence=pl.col("evidence").any()
    )
    extra = pl.concat(
        [per_shard, whole.with_columns(shard_id=pl.lit(WHOLE_RUN)).select(per_shard.columns)]
    )
    return rows.join(extra, on=["shard_id", "minute_ns"], how="left")


def _declared_caps(window: pl.DataFrame, minutes: pl.Series) -> pl.DataFrame:
    """Largest cap declared by each shard's attempts (rollups too) ending in each minute."""
    return (
        window.filter(pl.col("concurrency_cap").is_not_null())
        .with_columns(minute_ns=(pl.col("end_ns") // MINUTE_NS) * MINUTE_NS)
        .filter(pl.col("minute_ns").is_in(minutes.implode()))
        .group_by("shard_id", "minute_ns")
        .agg(concurrency_cap=pl.col("concurrency_cap").max().cast(pl.Int32))
    )


def _concurrency_rows(series: SecondSeries, caps: Mapping[str, int]) -> pl.DataFrame:
    """In-flight and queue depth mean/max, and the work-conserving seconds, per shard and
    whole-run minute of the series' window (queue depth unmasked, see the module docstring)."""
    shards = list(series.shard_ids)
    samples = minute_samples(series, caps)
    count = series.window_minutes
    caps_used = [caps.get(s) for s in shards] + [None]
    return pl.DataFrame(
        {
            "shard_id": np.repeat(np.array([*shards, WHOLE_RUN], dtype=object), count).tolist(),
            "minute_ns": np.tile(samples.minute_ns, len(shards) + 1),
            "in_flight_mean": samples.in_flight_mean.ravel(),
            "in_flight_max": samples.in_flight_max.ravel(),
            "queue_depth_mean": samples.queue_depth_mean.ravel(),
            "queue_depth_max": samples.queue_depth_max.ravel(),
            "queue_seconds": samples.queue_seconds.ravel(),
            "sag_seconds": samples.sag_seconds.ravel(),
            "sag_cap": np.repeat(np.array(caps_used, dtype=object), count).tolist(),
        },
        schema_overrides={"shard_id": pl.String, "minute_ns": pl.Int64, "sag_cap": pl.Int32},
    )


def live_minute_rows(
    window: pl.DataFrame, minutes_ns: Sequence[int], caps: Mapping[str, int]
) -> pl.DataFrame:
    """Rows (``minute_ns`` in place of ``minute_utc``) of every minute in ``minutes_ns``.

    ``window`` holds every attempt ending in those minutes and every attempt whose
    interval overlaps them, with the storage probes' ``rollup`` and ``later_in_call``
    flags (:func:`storage.readers.live_window.fetch_window`). ``caps`` is the run's cap per shard
    as known so far; the rows record which cap their work-conserving seconds used.
    """
    minutes = pl.Series("minute_ns", sorted(set(minutes_ns)), dtype=pl.Int64)
    events = window.filter(pl.col("rollup") == 0)
    ending = events.filter(((pl.col("end_ns") // MINUTE_NS) * MINUTE_NS).is_in(minutes.implode()))
    cells = _cell_rows(ending)
    del ending  # each working copy of the window goes as soon as it is used
    declared = _declared_caps(window, minutes)
    known = dict(caps)
    for shard, cap in declared.group_by("shard_id").agg(pl.col("concurrency_cap").max()).rows():
        known[shard] = max(known.get(shard, 0), int(cap))
    canonical = _canonical(events) if events.height else None
    del events
    concurrency = None
    if canonical is not None and minutes.len():
        # Figures of the asked minutes only: no cost follows the intervals' length.
        asked = (minutes[0], (minutes[-1] - minutes[0]) // MINUTE_NS + 1)
        concurrency = _concurrency_rows(second_series(canonical, window=asked), known)
    del canonical
    # Shards whose attempts here are all rollups still declare a cap (the run's '*' cap
    # sums every shard's), so they get rows too; the read side shows shards with calls.
    shard_sets = [set(cells["shard_id"]) if cells is not None else set(), set(declared["shard_id"])]
    if concurrency is not None:
        shard_sets.append(set(concurrency["shard_id"]))
    shards = sorted(set().union(*shard_sets) - {WHOLE_RUN})
    keys = pl.DataFrame({"shard_id": pl.Series([*shards, WHOLE_RUN], dtype=pl.String)}).join(
        minutes.to_frame(), how="cross"
    )
    table = keys
    if cells is not None:
        table = table.join(cells, on=["shard_id", "minute_ns"], how="left")
    if concurrency is not None:
        table = table.join(concurrency, on=["shard_id", "minute_ns"], how="left")
    table = table.join(declared, on=["shard_id", "minute_ns"], how="left")
    return finished_rows(table)


def _value_summary(values: np.ndarray) -> dict[str, Any] | None:
    """Count, sum, squared deviations and DDSketch bins of one minute's values, stored
    form (:mod:`analytics.kernels.value_sketch`; keys as ``LogarithmicMapping.key``)."""
    if values.size == 0:
        return None
    n, total = int(values.size), float(values.sum())
    m2 = float(((values - total / n) ** 2).sum())
    mapped = values[values > MIN_MAPPED]
    # Spans never end before they start (docs/ingest.md#limits): nothing maps below zero.
    keys = np.ceil(np.log(mapped) / np.log(2.0) * KEY_MULTIPLIER).astype(np.int64)
    unique, counts = np.unique(keys, return_counts=True)
    return summary(total, m2, n, unique, counts.astype(np.int64)).as_json()


def _declared_seconds(text: str) -> pl.Expr:
    """A declared deadline or timeout: a finite positive number, else null (as the seal's
    storage.readers.pitfall_attributes reads them)."""
    value = pl.col(text).str.strip_chars().cast(pl.Float64, strict=False)
    return pl.when(value.is_finite() & (value > 0)).then(value)


def _deadline_fold(rows: pl.DataFrame, run_timeout: float | None) -> dict[str, Any]:
    """The deadline overrun's sums over one minute's attempts (docs/metrics.md#diagnostics):
    attempts with their own deadline (else request timeout), and those without one
    checked against ``run_timeout`` (the run's largest declared timeout, recorded as
    ``limit`` so a larger one declared later queues the minute again)."""
    slot = (pl.col("end_ns") - pl.col("start_ns")) * (1 / 1e9)
    folded = rows.select(own=pl.coalesce("deadline_s", "timeout_s"), slot_s=slot).with_columns(
        limit=pl.coalesce("own", pl.lit(run_timeout, dtype=pl.Float64))
    )
    checked = folded.filter(pl.col("limit").is_not_null())
    over = checked.filter(pl.col("slot_s") > pl.col("limit"))
    return {
        "attempts": checked.height,
        "over": over.height,
        "wasted_s": float((over.get_column("slot_s") - over.get_column("limit")).sum()),
        "without_own": int(folded.get_column("own").null_count()),
        "limit": run_timeout,
    }


def run_minute_facts(
    window: pl.DataFrame, minutes_ns: Sequence[int], run_timeout: float | None = None
) -> list[dict[str, Any]]:
    """Per minute of ``minutes_ns`` (whole run), the facts run-level figures need
    (storage.schema.models.LiveRunMinute): calls whose last attempt ends here, how many
    succeeded, the causes of the failed attempts a later attempt retried, and the TTFT
    (successful attempts that report one) and latency summaries.

    ``window`` is :func:`live_minute_rows`' input with the probed ``has_later`` flag (a
    later non-rollup attempt of the attempt's explicit call exists). ``run_timeout`` is
    the run's largest request timeout known so far (the deadline of attempts declaring
    none)."""
    # Only the columns read here are carried (a busy minute's window is ~1 M rows).
    window = window.select(
        "rollup",
        "end_ns",
        "start_ns",
        "status",
        "call_id_explicit",
        "has_later",
        "error_type",
        "ttft_s",
        "deadline_text",
        "timeout_text",
    ).with_columns(
        deadline_s=_declared_seconds("deadline_text"),
        timeout_s=_declared_seconds("timeout_text"),
        minute_ns=(pl.col("end_ns") // MINUTE_NS) * MINUTE_NS,
    )
    timeouts = window.group_by("minute_ns").agg(pl.col("timeout_s").max())
    max_timeout = {m: t for m, t in timeouts.iter_rows() if t is not None}
    events = window.filter(pl.col("rollup") == 0).with_columns(
        ok=pl.col("status") == "ok",
        retried=(pl.col("call_id_explicit") == 1) & (pl.col("has_later") == 1),
    )
    out = []
    for minute in sorted(set(minutes_ns)):
        rows = events.filter(pl.col("minute_ns") == minute)
        last = rows.filter(~pl.col("retried"))
        causes = (
            rows.filter(pl.col("retried") & ~pl.col("ok"))
            .group_by(pl.col("error_type").fill_null("error"))
            .len()
        )
        ttft = rows.filter(pl.col("ok") & pl.col("ttft_s").is_not_null()).get_column("ttft_s")
        latency = (rows.get_column("end_ns") - rows.get_column("start_ns")).to_numpy()
        out.append(
            {
                "minute_ns": minute,
                "attempts": rows.height,
                "explicit_calls": int((rows.get_column("call_id_explicit") == 1).sum()),
                "logical_calls": last.height,
                "call_successes": int(last.get_column("ok").sum()),
                "retry_causes": {str(k): int(v) for k, v in causes.iter_rows()},
                "ttft": _value_summary(ttft.to_numpy().astype(np.float64)),
                "latency": _value_summary(latency.astype(np.float64) * (1.0 / 1e9)),
                # Rollups declare timeouts too: the run's largest counts them.
                "max_timeout_s": max_timeout.get(minute),
                "deadline": _deadline_fold(rows, run_timeout),
            }
        )
    return out


def minute_extras(
    window: pl.DataFrame, minutes_ns: Sequence[int]
) -> list[tuple[int, str, str, int]]:
    """(minute_ns, kind, key, value) of the attempts ending in ``minutes_ns``."""
    # Only the columns read here are filtered (a busy minute's window is ~1 M rows).
    needed = ["rollup", "end_ns", "status", "error_type", *TOKEN_TYPES]
    events = (
        window.select(needed)
        .filter(pl.col("rollup") == 0)
        .with_columns(minute_ns=(pl.col("end_ns") // MINUTE_NS) * MINUTE_NS)
    )
    events = events.filter(
        pl.col("minute_ns").is_in(pl.Series(list(minutes_ns), dtype=pl.Int64).implode())
    )
    rows: list[tuple[int, str, str, int]] = []
    for column, token_type in TOKEN_TYPES.items():
        reported = events.filter(pl.col(column).is_not_null())
        for minute_ns, value in (
            reported.group_by("minute_ns").agg(pl.col(column).sum()).sort("minute_ns").rows()
        ):
            rows.append((int(minute_ns), "tokens", token_type, int(value)))
    failed = events.filter(pl.col("status") == "error").with_columns(
        pl.col("error_type").fill_null("error")
    )
    for minute_ns, error_type, count in (
        failed.group_by("minute_ns", "error_type").len().sort("minute_ns", "error_type").rows()
    ):
        rows.append((int(minute_ns), "errors", str(error_type), int(count)))
    return rows
