"""Rules several figure paths share, with no heavy imports (the read API uses them too).

- Floats are published rounded to 12 significant digits, so sums taken in different orders
  (threads, a seal from the database, a verification from ``events.jsonl``) publish the same
  numbers (docs/metrics.md).
- The work-conserving check: among seconds with a queue, the share where in-flight is below
  0.9 × cap is the sag; it passes at ≤ 5 % (docs/metrics.md#concurrency-1-second-resolution).
- A retry-storm minute: retries / first attempts exceeds the retry budget (default 0.2); a
  minute with retries and no first attempt at all is one too (docs/metrics.md#diagnostics).
  The sealed diagnostics and the ``/metrics`` gauge (docs/operations.md) both use it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from tpmledger.analytics.kernels.figure_registry import figure

SIGNIFICANT_DIGITS = 12
SAG_FRACTION_OF_CAP = 0.9
SAG_PASS_SHARE = 0.05
#: Retries per first attempt above which a minute is a retry storm (docs/metrics.md#diagnostics).
DEFAULT_RETRY_BUDGET = 0.2


def clean(value: Any) -> Any:
    """Floats rounded to 12 significant digits (in dicts too)."""
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    if isinstance(value, dict):
        return {k: clean(v) for k, v in value.items()}
    return value


@figure("work_conserving")
def work_conserving_result(queued: int | None = None, sag: int = 0) -> dict[str, Any]:
    """The check's published object; ``None`` figures when it cannot be measured."""
    result: dict[str, Any] = {
        "sag_share": None,
        "seconds_with_queue": queued,
        "passes": None,
        "threshold": SAG_PASS_SHARE,
        "sag_below_fraction_of_cap": SAG_FRACTION_OF_CAP,
    }
    if queued:
        share = sag / queued
        result["sag_share"] = share
        result["passes"] = share <= SAG_PASS_SHARE
    return result


def is_retry_storm_minute(
    calls: int, retries: int | None, budget: float = DEFAULT_RETRY_BUDGET
) -> bool:
    """Whether a minute with ``calls`` attempts, ``retries`` of them retries, is a storm:
    retries / first attempts above ``budget`` (no first attempt but retries: unbounded)."""
    retried = retries or 0
    first = calls - retried
    return bool(retried) and (first <= 0 or retried / first > budget)


@figure("retry_storm")
def retry_storm_result(
    minutes: Iterable[tuple[str, int, int | None]], budget: float = DEFAULT_RETRY_BUDGET
) -> dict[str, Any]:
    """``{flag, budget, minutes}``: the minutes (``(minute_utc text, calls, retries)``)
    whose retries / first attempts exceeds ``budget``."""
    storm = [m for m, calls, retried in minutes if is_retry_storm_minute(calls, retried, budget)]
    return {"flag": bool(storm), "budget": budget, "minutes": storm}
