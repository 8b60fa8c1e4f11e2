"""Run-level figures over a run's whole-run minute rows and totals: one formula each
(docs/metrics.md#per-run).

Plain Python over at most a few thousand rows, so the read API's process can call them
without Polars. The streaming seal passes every minute of the version; the live run object
passes the minutes it holds, leaving open minutes out of peaks and the sustained rate; the
per-run ``/metrics`` series passes the newest minute. The rows differ, the code does not.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tpmledger.analytics.kernels.figure_registry import figure

Row = Mapping[str, Any]

PEAK_FIELDS = ("calls_in_minute", "completion_tpm_out", "prompt_tpm_in", "tpm_total")


@figure("ratio")
def ratio(part: int | float | None, whole: int | float | None) -> float | None:
    """``part / whole``; not measured (None) without a part or with nothing to divide by.
    Success and retry rates, of a run or of a minute."""
    if part is None or not whole:
        return None
    return part / whole


@figure("peak_minute")
def peak_minute(
    whole: Sequence[Row], by: str, minute: str, as_text: Callable[[Any], str]
) -> dict[str, Any] | None:
    """The minute with the most ``by`` among minutes with attempts, ties to the earliest
    (rows keyed by ``minute``, written with ``as_text``); None without such a minute."""
    active = [r for r in whole if r["calls_in_minute"] > 0]
    if not active:
        return None
    row = min(active, key=lambda r: (-r[by], r[minute]))
    return {
        "minute_utc": as_text(row[minute]),
        "shard_count": row["shards_active"],
        **{name: row[name] for name in PEAK_FIELDS},
    }


@figure("sustained_tpm_total")
def sustained_tpm_total(inner_totals: Sequence[int | float]) -> float | None:
    """Median ``tpm_total`` of the minutes strictly between the run's first and last."""
    if not inner_totals:
        return None
    return float(statistics.median(inner_totals))


@figure("shard_balance")
def shard_balance(tokens_by_shard: Mapping[str, int]) -> dict[str, Any]:
    """Each shard's share of the run's tokens and the imbalance, max share / mean share."""
    total = sum(tokens_by_shard.values())
    if total == 0:
        return {"shares": None, "imbalance": None}
    shares = {shard: tokens / total for shard, tokens in tokens_by_shard.items()}
    mean = 1 / len(shares)
    return {"shares": shares, "imbalance": max(shares.values()) / mean}
