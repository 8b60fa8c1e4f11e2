"""What a minute's state gives: its live rows, run facts, target sums and extras.

A minute's rows are computed from its state (:mod:`analytics.live.minute_state`) with the
same arithmetic as the window recomputation (tests/analytics/oracle/live_window.py) (the same
percentile and moment kernels over the same sorted values), so they are the same figures.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from tpmledger.analytics.kernels.cell_figures import value_columns
from tpmledger.analytics.kernels.concurrency import minute_cells, sampled_series
from tpmledger.analytics.kernels.event_arrays import latency_seconds
from tpmledger.analytics.kernels.group_quantiles import SortedGroups
from tpmledger.analytics.kernels.value_sketch import KEY_MULTIPLIER, MIN_MAPPED, summary
from tpmledger.analytics.live.live_row_schema import LIVE_ROW_SCHEMA, finished_rows
from tpmledger.analytics.live.minute_state import (
    _EMPTY_FLOATS,
    _EMPTY_INTS,
    SUMS,
    Floats,
    Ints,
    MinuteState,
)
from tpmledger.durations import SECOND_NS
from tpmledger.storage.schema.minute_keys import WHOLE_RUN


def _value_figures(
    cells: Sequence[tuple[npt.NDArray[Any], int]], name: str
) -> list[dict[str, Any]]:
    """Percentiles (and for TTFT mean and variance) of each cell's sorted values and
    null count, as the seal's cells get theirs (one call of each kernel over all cells:
    a backfill's update has ~1,000)."""
    starts = np.zeros(len(cells) + 1, np.int64)
    np.cumsum([values.size for values, _ in cells], out=starts[1:])
    groups = SortedGroups(
        np.concatenate([values for values, _ in cells]) if cells else _EMPTY_FLOATS,
        starts,
        np.array([nulls for _, nulls in cells], np.int64),
    )
    to_values = latency_seconds if name == "latency" else None
    columns = {
        key: column.to_list() for key, column in value_columns([groups], to_values, name).items()
    }
    return [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]


def _concurrency(
    state: MinuteState, shards: Sequence[str], caps: Mapping[str, int]
) -> list[dict[str, Any]]:
    """In-flight and queue depth mean/max, queue and sag seconds of ``shards`` then ``'*'``
    in the minute: its kept samples given to the seal's formula
    (:func:`analytics.kernels.concurrency.minute_cells`)."""
    rows = len(shards)
    flight = np.zeros((rows + 1, 60), np.int64)
    depth = np.zeros((rows + 1, 60), np.int64)
    for i, shard in enumerate(shards):
        if shard in state.flight:
            flight[i] = state.flight[shard]
        if shard in state.depth:
            depth[i] = state.depth[shard]
    flight[rows] = flight[:rows].sum(axis=0)
    depth[rows] = depth[:rows].sum(axis=0)
    series = sampled_series(tuple(shards), flight, depth, state.minute_ns // SECOND_NS)
    cells = minute_cells(series, caps)
    out: list[dict[str, Any]] = [
        {
            "in_flight_mean": 0.0,
            "in_flight_max": 0,
            "queue_depth_mean": 0.0,
            "queue_depth_max": 0,
            "queue_seconds": int(cells.queue_seconds[row]),
            "sag_seconds": int(cells.sag_seconds[row]),
        }
        for row in range(rows + 1)
    ]
    for c, row in enumerate(cells.row.tolist()):
        out[row]["in_flight_mean"] = float(cells.in_flight_mean[c])
        out[row]["in_flight_max"] = int(cells.in_flight_max[c])
        out[row]["queue_depth_mean"] = float(cells.queue_depth_mean[c])
        out[row]["queue_depth_max"] = int(cells.queue_depth_max[c])
    return out


def minute_rows(states: Sequence[MinuteState], caps: Mapping[str, int]) -> pl.DataFrame:
    """The live rows of ``states``' minutes (one contiguous range), as
    the window recomputation (tests/analytics/oracle/live_window.py) gives them."""
    known = dict(caps)
    for state in states:
        for shard, cap in state.caps.items():
            known[shard] = max(known.get(shard, 0), cap)
    records: list[dict[str, Any]] = []
    ttft_cells: list[tuple[npt.NDArray[Any], int]] = []
    latency_cells: list[tuple[npt.NDArray[Any], int]] = []
    zero_sums = np.zeros(len(SUMS), np.int64)
    for state in states:
        shards = sorted(set(state.sums) | set(state.caps) | set(state.flight))
        concurrency = _concurrency(state, shards, known)
        total = zero_sums.copy()
        active = 0
        for shard, samples in zip(shards, concurrency[:-1], strict=True):
            sums = state.sums.get(shard, zero_sums)
            total += sums
            active += int(sums[0] > 0)
            ttft = state.ttft.get(shard, _EMPTY_FLOATS)
            ttft_cells.append((ttft, int(sums[0]) - ttft.size))
            latency_cells.append((state.latency.get(shard, _EMPTY_INTS), 0))
            records.append(
                {
                    "shard_id": shard,
                    "minute_ns": state.minute_ns,
                    **_counts(sums),
                    "shards_active": int(sums[0] > 0),
                    **samples,
                    "sag_cap": known.get(shard),
                    "concurrency_cap": state.caps.get(shard),
                }
            )
        ttft, latency = state.whole_values()
        ttft_cells.append((ttft, int(total[0]) - ttft.size))
        latency_cells.append((latency, 0))
        records.append(
            {
                "shard_id": WHOLE_RUN,
                "minute_ns": state.minute_ns,
                **_counts(total),
                "shards_active": active,
                **concurrency[-1],
                "sag_cap": None,
                "concurrency_cap": None,
            }
        )
    for record, ttft_figures, latency_figures in zip(
        records,
        _value_figures(ttft_cells, "ttft"),
        _value_figures(latency_cells, "latency"),
        strict=True,
    ):
        record |= ttft_figures | latency_figures
    names = records[0].keys() if records else ()
    schema = {"shard_id": pl.String(), "minute_ns": pl.Int64()}
    schema |= {name: dtype for name, dtype in LIVE_ROW_SCHEMA.items() if name in names}
    table = pl.DataFrame(records, schema=schema)
    return finished_rows(table)


def _counts(sums: Ints) -> dict[str, Any]:
    out = {name: int(sums[i]) for i, name in enumerate(SUMS) if name != "evidence"}
    out["retry_evidence"] = bool(sums[SUMS.index("evidence")] > 0)
    return out


def minute_facts(state: MinuteState, run_timeout: float | None) -> dict[str, Any]:
    """The minute's run facts (storage.schema.models.LiveRunMinute), as
    the window recomputation gives them."""
    attempts = sum(int(s[0]) for s in state.sums.values())
    ttft, latency = state.whole_values()
    if not state.own_checked:  # no attempt has a deadline of its own: every slot counts
        slots = latency_seconds(latency)
    else:
        slots = np.concatenate(state.no_own_slots) if state.no_own_slots else _EMPTY_FLOATS
    checked, over, wasted = state.own_checked, state.own_over, state.own_wasted
    if run_timeout is not None:
        late = slots[slots > run_timeout]
        checked += int(slots.size)
        over += int(late.size)
        wasted += float((late - run_timeout).sum())
    return {
        "minute_ns": state.minute_ns,
        "tools": {
            "slot_ns": int(latency.sum()),
            "held_ns": state.tool_held_ns,
            "holding": state.tool_holding,
            "tool_spans": state.tool_spans,
        },
        "targets": minute_targets(state),
        "attempts": attempts,
        "explicit_calls": state.explicit_calls,
        "logical_calls": state.logical_calls,
        "call_successes": state.call_successes,
        "retry_causes": {cause: n for cause, n in state.causes.items() if n},
        "ttft": _sorted_summary(ttft),
        "latency": _sorted_summary(latency, 1.0 / 1e9),
        "max_timeout_s": state.max_timeout,
        "deadline": {
            "attempts": checked,
            "over": over,
            "wasted_s": wasted,
            "without_own": int(slots.size),
            "limit": run_timeout,
        },
    }


def minute_targets(state: MinuteState) -> list[dict[str, Any]]:
    """Per target of the minute: ``cap`` declared by its attempts ending in it, ``first`` /
    ``last`` (the least ceil(start) and largest ceil(end), in whole seconds, of its
    attempts ending in it), ``busy`` (first and one past the last second with something in
    flight) and ``levels`` ([in-flight, seconds] for every level above 0)."""
    out = []
    targets = set(state.target_caps) | set(state.target_bounds) | set(state.target_flight)
    for target in sorted(
        targets, key=lambda t: (t[0] or "", t[0] is None, t[1] or "", t[1] is None)
    ):
        provider, model = target
        bounds = state.target_bounds.get(target)
        flight = state.target_flight.get(target)
        levels: list[list[int]] = []
        busy = None
        if flight is not None and flight.any():
            level, seconds = np.unique(flight[flight > 0], return_counts=True)
            levels = [list(pair) for pair in zip(level.tolist(), seconds.tolist(), strict=True)]
            at = np.flatnonzero(flight > 0)
            first = state.minute_ns // SECOND_NS
            busy = [first + int(at[0]), first + int(at[-1]) + 1]
        out.append(
            {
                "provider": provider,
                "model": model,
                "cap": state.target_caps.get(target),
                "first": None if bounds is None else bounds[0],
                "last": None if bounds is None else bounds[1],
                "busy": busy,
                "levels": levels,
            }
        )
    return out


_SUMMARY_CHUNK = 65_536


def _sorted_summary(values: npt.NDArray[Any], scale: float | None = None) -> dict[str, Any] | None:
    """the window recomputation's value summary of sorted ``values`` (times
    ``scale``), a chunk at a time: the same bins (each value maps alone), and the same sums
    up to the order of float additions, without whole-minute temporaries."""
    if values.size == 0:
        return None
    n = int(values.size)

    def chunks() -> Iterable[Floats]:
        for low in range(0, n, _SUMMARY_CHUNK):
            part = values[low : low + _SUMMARY_CHUNK].astype(np.float64)
            yield part * scale if scale is not None else part

    total = sum(float(part.sum()) for part in chunks())
    mean = total / n
    m2 = sum(float(((part - mean) ** 2).sum()) for part in chunks())
    keys, counts = [], []
    for part in chunks():
        mapped = part[part > MIN_MAPPED]
        # Spans never end before they start (docs/ingest.md#limits): nothing maps below zero.
        key = np.ceil(np.log(mapped) / np.log(2.0) * KEY_MULTIPLIER).astype(np.int64)
        unique, count = np.unique(key, return_counts=True)
        keys.append(unique)
        counts.append(count)
    if keys:
        every, where = np.unique(np.concatenate(keys), return_inverse=True)
        summed = np.bincount(where, weights=np.concatenate(counts)).astype(np.int64)
    else:
        every, summed = _EMPTY_INTS, _EMPTY_INTS
    return summary(total, m2, n, every, summed).as_json()


def minute_extras(state: MinuteState) -> list[tuple[int, str, str, int]]:
    """(minute_ns, kind, key, value) as the window recomputation."""
    rows = [
        (state.minute_ns, "tokens", token_type, total)
        for token_type, (count, total) in state.tokens.items()
        if count
    ]
    rows += [(state.minute_ns, "errors", e, n) for e, n in sorted(state.errors.items()) if n]
    return rows
