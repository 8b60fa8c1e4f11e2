"""Logical calls (SPEC §2, §4): the attempts that share a ``call_id`` are one call.

Per run: how many logical calls, how many succeeded (their *last* attempt succeeded, by
(start_ns, end_ns, span_id)), and the retry causes (error types of failed attempts that
a later attempt of the same call retried). Only calls with several attempts need
ordering; they are found by repeated 64-bit hashes of the call id (one sort), so the
million single-attempt calls of a typical run are only counted.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

_CALL_ORDER = ("start_ns", "end_ns", "span_id")


def flag_repeated_calls(plan: pl.LazyFrame, call_ids: pl.Series) -> pl.LazyFrame:
    """``plan`` with ``_many``: the attempt's call id (by 64-bit hash) occurs again.

    Hashing once is half the cost of hashing the strings twice; a collision only sends
    a one-attempt call down the exact per-call path, which still counts it right.
    """
    return plan.with_columns(_many=pl.Series(repeated(call_ids.hash().to_numpy())))


def repeated(values: npt.NDArray[np.uint64]) -> npt.NDArray[np.bool_]:
    """Which entries occur more than once (one sort; membership in the few repeats)."""
    ordered = np.sort(values)
    repeats = np.unique(ordered[1:][ordered[1:] == ordered[:-1]])
    # Polars' hash-set probe; NumPy's searchsorted of unsorted needles was 15x slower.
    return pl.Series(values).is_in(pl.Series(repeats).implode()).to_numpy()


def call_queries(plan: pl.LazyFrame, explicit: bool) -> list[pl.LazyFrame]:
    """Queries for (logical calls, calls whose last attempt succeeded, retry causes).

    The last attempt of a call is the latest by (start_ns, end_ns, span_id). Only calls
    with several attempts need ordering, so single-attempt calls are only counted;
    ``plan`` must carry ``_many`` (see :func:`flag_repeated_calls`) when ``explicit``.
    """
    if not explicit:
        # Every attempt is its own logical call; causes cannot be linked to a retry.
        return [plan.select(n=pl.len(), ok=pl.col("ok").sum())]
    single = plan.filter(~pl.col("_many")).select(n=pl.len(), ok=pl.col("ok").sum())
    order = list(_CALL_ORDER)
    failed_type = pl.when(~pl.col("ok")).then(pl.col("error_type").fill_null("error"))
    per_call = (
        plan.filter(pl.col("_many"))
        .group_by("call_id")
        .agg(
            last_ok=pl.col("ok").sort_by(order).last(),
            # failed attempts that a later attempt of the same call retried
            retried=failed_type.sort_by(order).head(pl.len() - 1),
        )
    )
    return [single, per_call]


def logical_calls(results: list[pl.DataFrame], measured: bool) -> tuple[int, int, Any]:
    """(logical calls, calls whose last attempt succeeded, retry causes or None)."""
    n_single, ok_single = results[0].row(0)
    if len(results) == 1:
        return int(n_single), int(ok_single or 0), None
    multi = results[1]
    calls = int(n_single) + multi.height
    ok_calls = int(ok_single or 0) + int(multi.get_column("last_ok").sum())
    if not measured:
        return calls, ok_calls, None
    causes = (
        multi.select(pl.col("retried").explode().drop_nulls())
        .group_by("retried")
        .len()
        .sort("retried")
    )
    return calls, ok_calls, {r: int(n) for r, n in causes.iter_rows()}
