"""Per-minute outcomes the minute table does not carry, for ``tpmledger compare``.

- ``stalls``: failed attempts whose error was a timeout or a cancellation (a connection or
  request that stalled), by the UTC minute of their end time. An error type is a stall
  when, lower-cased, it contains one of :data:`STALL_MARKERS` or is one of
  :data:`STALL_HTTP_TYPES` (docs/metrics.md#compare).
- ``calls_final`` / ``calls_ok``: logical calls by the minute their last attempt ended,
  and how many of those succeeded (the call success rate of docs/metrics.md, per minute).

Stored with each sealed version (``snapshot_diagnostics.minute_outcomes``) as columns over
every minute from the run's first to its last, so compare resamples minutes without
reading attempts.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl

from tpmledger.analytics.kernels.event_plans import CALL_ORDER
from tpmledger.analytics.kernels.logical_calls import repeated
from tpmledger.durations import MINUTE_NS
from tpmledger.storage.codecs.time_text import minute_text_ns

STALL_MARKERS: Final = ("timeout", "timed_out", "timedout", "deadline", "cancel")
STALL_HTTP_TYPES: Final = ("http_408", "http_499", "http_504")


def is_stall() -> pl.Expr:
    """Failed attempts that timed out or were cancelled."""
    kind = pl.col("error_type").fill_null("").str.to_lowercase()
    marked = pl.any_horizontal([kind.str.contains(m, literal=True) for m in STALL_MARKERS])
    return (pl.col("status") == "error") & (marked | kind.is_in(list(STALL_HTTP_TYPES)))


def final_attempts(events: pl.DataFrame, explicit: bool) -> pl.DataFrame:
    """(end_ns, ok as 0/1) of each logical call's last attempt (by start, end, span id, trace id);
    without ``explicit`` call ids every attempt is its own call."""
    base = events.select(*CALL_ORDER, "call_id", ok=(pl.col("status") == "ok").cast(pl.Int64))
    if not explicit:
        return base.select("end_ns", "ok")
    many = pl.Series(repeated(events.get_column("call_id").hash().to_numpy()))
    single = base.filter(~many).select("end_ns", "ok")
    multi = (
        base.filter(many)
        .sort(["call_id", *CALL_ORDER])
        .group_by("call_id", maintain_order=True)
        .agg(pl.col("end_ns").last(), pl.col("ok").last())
        .select("end_ns", "ok")
    )
    return pl.concat([single, multi])


def _counts(frame: pl.DataFrame, first: int, n: int, weight: str | None) -> npt.NDArray[np.int64]:
    index = ((frame.get_column("end_ns").to_numpy() - first) // MINUTE_NS).astype(np.int64)
    weights = None if weight is None else frame.get_column(weight).to_numpy().astype(np.int64)
    return np.bincount(index, weights=weights, minlength=n).astype(np.int64)


def stall_ends(events: pl.DataFrame) -> pl.DataFrame:
    """``end_ns`` of the stalled attempts of ``events``."""
    return events.filter(is_stall()).select("end_ns")


def outcome_counts(
    stalls: pl.DataFrame, finals: pl.DataFrame, first: int, n: int
) -> npt.NDArray[np.int64]:
    """Rows stalls, calls_final, calls_ok over the ``n`` minutes from ``first``, of
    ``stalls`` (``end_ns``) and ``finals`` (``end_ns`` and ``ok`` of last attempts)."""
    return np.stack(
        [
            _counts(stalls, first, n, None),
            _counts(finals, first, n, None),
            _counts(finals, first, n, "ok"),
        ]
    )


def outcome_columns(first: int, counts: npt.NDArray[np.int64]) -> dict[str, Any]:
    """The published columns of :func:`outcome_counts` rows whose first minute is ``first``."""
    stalls, calls_final, calls_ok = (row.tolist() for row in counts)
    return {
        "minute_utc": [minute_text_ns(first + i * MINUTE_NS) for i in range(counts.shape[1])],
        "stalls": stalls,
        "calls_final": calls_final,
        "calls_ok": calls_ok,
    }


def minute_outcomes(events: pl.DataFrame, *, explicit_call_ids: bool) -> dict[str, Any]:
    """Columns ``minute_utc``, ``stalls``, ``calls_final``, ``calls_ok`` (every minute)."""
    if events.height == 0:
        return outcome_columns(0, np.zeros((3, 0), np.int64))
    end = events.get_column("end_ns").to_numpy()
    first = int(end.min()) // MINUTE_NS * MINUTE_NS
    n = (int(end.max()) - first) // MINUTE_NS + 1
    finals = final_attempts(events, explicit_call_ids)
    return outcome_columns(first, outcome_counts(stall_ends(events), finals, first, n))
