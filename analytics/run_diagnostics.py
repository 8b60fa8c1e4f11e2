"""Diagnostics: the cap-selection pitfalls, each with its evidence (docs/metrics.md#diagnostics).

Each is ``None`` (not measured) when the telemetry cannot support it, never a false 0:

- ``retry_storm``: minutes where retries / first attempts exceeds the retry budget
  (default 0.2); ``None`` when the run's retries are not measured.
- ``deadline_overrun``: among attempts with a deadline (``tpmledger.deadline_s`` on the
  span, else a request timeout ``tpmledger.request.timeout_s`` on the span or its
  resource, else the largest request timeout the run declared), the share whose slot time
  (end − start) exceeded it, and the slot-seconds held past it. ``None`` when nothing
  declares a deadline.
- ``slot_held_by_tool``: seconds of tool spans (``execute_tool``) of the same trace inside
  an attempt's slot interval (overlapping tools merged), as a share of all slot-seconds.
  ``None`` when the run stored no tool span.
- ``target_saturation``: per (provider, model) target whose cap is declared
  (``tpmledger.target.concurrency.cap``): in-flight against that cap at whole-second
  instants (start ≤ t < end, as docs/metrics.md#concurrency). ``None`` when no target
  declares a cap.

Computed from a run's events and its stored declarations when a version is sealed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import polars as pl

from analytics.figure_rules import clean
from storage.pitfall_attributes import AttemptKey, Declarations, Target
from storage.time_text import minute_text_ns

DEFAULT_RETRY_BUDGET: Final = 0.2
SECOND_NS: Final = 1_000_000_000

DIAGNOSTIC_KEYS: Final = (
    "retry_storm",
    "deadline_overrun",
    "slot_held_by_tool",
    "target_saturation",
    "work_conserving",
)


def retry_storm(whole: pl.DataFrame, budget: float = DEFAULT_RETRY_BUDGET) -> dict[str, Any] | None:
    """Minutes of the whole-run minute table (``minute_ns``, ``calls_in_minute``,
    ``retries``) whose retries / first attempts exceeds ``budget``."""
    retries = whole.get_column("retries")
    if whole.height == 0 or retries.null_count() == whole.height:
        return None
    storm = []
    for minute_ns, calls, retried in whole.select(
        "minute_ns", "calls_in_minute", "retries"
    ).iter_rows():
        retried = retried or 0
        first = calls - retried
        # No first attempt at all but retries: an unbounded ratio, a storm.
        if retried and (first <= 0 or retried / first > budget):
            storm.append(minute_text_ns(minute_ns))
    return {"flag": bool(storm), "budget": budget, "minutes": storm}


def _keys(events: pl.DataFrame) -> pl.DataFrame:
    return events.select("trace_id", "span_id", "start_ns", "end_ns")


def _lookup(values: dict[AttemptKey, float], name: str) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "trace_id": [k[0] for k in values],
            "span_id": [k[1] for k in values],
            name: list(values.values()),
        },
        schema={"trace_id": pl.String, "span_id": pl.String, name: pl.Float64},
    )


def deadline_overrun(events: pl.DataFrame, declared: Declarations) -> dict[str, Any] | None:
    """Share of attempts with a deadline that held their slot past it, and the waste."""
    if not declared.deadlines and not declared.timeouts:
        return None
    run_timeout = max(declared.timeouts.values()) if declared.timeouts else None
    frame = (
        _keys(events)
        .join(_lookup(declared.deadlines, "deadline"), on=["trace_id", "span_id"], how="left")
        .join(_lookup(declared.timeouts, "timeout"), on=["trace_id", "span_id"], how="left")
        .select(
            slot_s=(pl.col("end_ns") - pl.col("start_ns")) / SECOND_NS,
            limit=pl.coalesce("deadline", "timeout", pl.lit(run_timeout, dtype=pl.Float64)),
        )
        .filter(pl.col("limit").is_not_null())
    )
    if frame.height == 0:
        return None
    over = frame.filter(pl.col("slot_s") > pl.col("limit"))
    wasted = float((over.get_column("slot_s") - over.get_column("limit")).sum())
    result: dict[str, Any] = clean(
        {
            "share": over.height / frame.height,
            "slot_seconds_wasted": wasted,
            "attempts_with_deadline": frame.height,
            "attempts_over_deadline": over.height,
        }
    )
    return result


def slot_held_by_tool(
    events: pl.DataFrame, tools: Sequence[tuple[str, int, int]]
) -> dict[str, Any] | None:
    """Tool-seconds inside slot intervals of the same trace, as a share of slot-seconds."""
    if not tools:
        return None
    slots = _keys(events).with_row_index("attempt")
    slot_seconds = float((slots.get_column("end_ns") - slots.get_column("start_ns")).sum())
    tool_frame = pl.DataFrame(
        {
            "trace_id": [t[0] for t in tools],
            "tool_start": [t[1] for t in tools],
            "tool_end": [t[2] for t in tools],
        },
        schema={"trace_id": pl.String, "tool_start": pl.Int64, "tool_end": pl.Int64},
    )
    inside = (
        slots.join(tool_frame, on="trace_id", how="inner")
        .with_columns(
            lo=pl.max_horizontal("start_ns", "tool_start"),
            hi=pl.min_horizontal("end_ns", "tool_end"),
        )
        .filter(pl.col("hi") > pl.col("lo"))
        .sort("attempt", "lo")
        # Overlapping tools count once: each interval adds only what extends past the
        # furthest end seen so far within its attempt.
        .with_columns(reach=pl.col("hi").cum_max().shift(1).over("attempt"))
        .with_columns(
            added=(pl.col("hi") - pl.max_horizontal("lo", pl.col("reach").fill_null(0))).clip(
                lower_bound=0
            )
        )
    )
    held = float(inside.get_column("added").sum()) if inside.height else 0.0
    result: dict[str, Any] = clean(
        {
            "share": held / slot_seconds if slot_seconds else None,
            "tool_slot_seconds": held / SECOND_NS,
            "slot_seconds": slot_seconds / SECOND_NS,
            "tool_spans": len(tools),
            "attempts_holding_for_tools": inside.get_column("attempt").n_unique(),
        }
    )
    return result


def _in_flight(starts: np.ndarray, ends: np.ndarray, cap: int) -> dict[str, Any]:
    """In-flight at whole seconds t with start ≤ t < end, as a step function (exact)."""
    up = -(-starts // SECOND_NS)  # ceil: start ≤ t  ⇔  ceil(start) ≤ t
    down = -(-ends // SECOND_NS)  # t < end  ⇔  t < ceil(end)
    times = np.concatenate([up, down])
    steps = np.concatenate([np.ones(up.size, np.int64), -np.ones(down.size, np.int64)])
    order = np.lexsort((steps, times))
    times, level = times[order], np.cumsum(steps[order])
    lengths = np.diff(times)  # level[i] holds from times[i] to times[i + 1]
    level = level[:-1]
    seconds = int(lengths.sum())
    if seconds == 0:
        return dict.fromkeys(
            ("seconds", "in_flight_mean", "in_flight_max", "share_at_cap", "share_over_cap")
        )
    return {
        "seconds": seconds,
        "in_flight_mean": float((level * lengths).sum() / seconds),
        "in_flight_max": int(level[lengths > 0].max()),
        "share_at_cap": float(lengths[level >= cap].sum() / seconds),
        "share_over_cap": float(lengths[level > cap].sum() / seconds),
    }


def target_saturation(
    events: pl.DataFrame,
    caps: dict[Target, int],
    target_attempts: Sequence[tuple[str, str, str | None, str | None]],
) -> list[dict[str, Any]] | None:
    """In-flight against the declared cap of each (provider, model) target."""
    if not caps:
        return None
    targets = pl.DataFrame(
        {
            "trace_id": [a[0] for a in target_attempts],
            "span_id": [a[1] for a in target_attempts],
            "provider": [a[2] for a in target_attempts],
            "target_model": [a[3] for a in target_attempts],
        },
        schema={
            "trace_id": pl.String,
            "span_id": pl.String,
            "provider": pl.String,
            "target_model": pl.String,
        },
    )
    joined = _keys(events).join(targets, on=["trace_id", "span_id"], how="inner")
    out = []
    for (provider, model), cap in sorted(
        caps.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))
    ):
        mine = joined.filter(
            pl.col("provider").eq_missing(provider) & pl.col("target_model").eq_missing(model)
        )
        figures = _in_flight(
            mine.get_column("start_ns").to_numpy(), mine.get_column("end_ns").to_numpy(), cap
        )
        out.append(clean({"provider": provider, "model": model, "cap": cap, **figures}))
    return out


def diagnostics_params(budget: float = DEFAULT_RETRY_BUDGET) -> dict[str, Any]:
    """How the diagnostics were computed; stored and printed with them."""
    return {
        "retry_budget": budget,
        "retry_storm": "minutes where retries / (attempts - retries) > retry_budget",
        "deadline": "tpmledger.deadline_s, else tpmledger.request.timeout_s (span, resource), "
        "else the largest request timeout the run declared",
        "slot_time": "end - start of the attempt span",
        "tool_overlap": "execute_tool spans of the same trace, clipped to the slot, merged",
        "in_flight_sampling": "whole_second_instants",
    }
