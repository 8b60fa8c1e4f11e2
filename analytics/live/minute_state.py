"""Per live minute, mergeable partial state instead of the minute's attempts.

The live updater used to keep every attempt of the range it last read and recompute the
whole range from those rows on every update: at 15,000 spans/s a busy minute is ~900,000
attempts (~150 MiB of columns), and each recomputation copied them again. Here each live
minute keeps only what its figures need (docs/metrics.md#live-figures), and every update
folds the attempts it reads into it:

- per shard, of the attempts ending in the minute (rollups left out): counts and sums
  (calls, tokens, successes, retries, queue reports, retry evidence), and the values
  exact percentiles and the TTFT moments need, sorted (TTFT float64, latency int64 ns);
- for the whole minute: logical calls, call successes, retry causes, explicit calls, the
  deadline overrun's sums (and the slots of attempts without a deadline of their own, as
  the run's largest timeout may still change), token extras and errors by type, the
  largest declared timeout and per shard the largest declared cap (rollups too);
- per shard, in-flight and queue depth at each of the minute's 60 whole seconds, from the
  attempts whose interval overlaps it (rollups left out);
- for the diagnostics (docs/metrics.md#diagnostics): the tool-held time of the attempts
  ending in the minute (each attempt's ``tool_held_ns``, computed by the updater from its
  trace's tool spans) and the tool spans starting in it; per (provider, model) target,
  in-flight at each of the 60 seconds, the first start and last end second of its
  attempts ending in the minute, and the largest cap they declare (rollups too).

A minute's rows, run facts and extras are then computed from its state
(:mod:`analytics.live.minute_state_figures`). Folding is additive only: an attempt whose
flags change (``rollup``, ``later_in_call``, ``has_later``) makes the updater rebuild its
minutes from the database (:mod:`analytics.live.run_update`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from tpmledger.analytics.kernels.event_arrays import latency_seconds
from tpmledger.analytics.kernels.second_samples import sample_bounds, window_samples
from tpmledger.durations import MINUTE_NS, SECOND_NS

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Target = tuple[str | None, str | None]  # (provider, model)

#: Per-shard counts of the attempts ending in a minute, in this order.
SUMS = (
    "calls_in_minute",
    "prompt_tpm_in",
    "completion_tpm_out",
    "successes",
    "retries",
    "queue_reports",
    "evidence",
)
_EMPTY_FLOATS = np.zeros(0, dtype=np.float64)
_EMPTY_INTS = np.zeros(0, dtype=np.int64)

#: Column of an attempt -> token type of ``tpmledger_run_tokens_total`` (the minute extras).
TOKEN_TYPES = {
    "cache_read_tokens": "cache_read",
    "cache_write_tokens": "cache_write",
    "reasoning_tokens": "reasoning",
}


def _merged(old: npt.NDArray[Any], new: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Sorted ``old`` with ``new`` merged in (a stable sort finds the two runs)."""
    if new.size == 0:
        return old
    both = np.concatenate([old, new.astype(old.dtype, copy=False)])
    both.sort(kind="stable")
    return both


@dataclass
class MinuteState:
    """What one minute's live rows, run facts and extras are computed from."""

    minute_ns: int
    sums: dict[str, Ints] = field(default_factory=dict)  # shard -> SUMS
    ttft: dict[str, Floats] = field(default_factory=dict)  # shard -> sorted seconds
    latency: dict[str, Ints] = field(default_factory=dict)  # shard -> sorted ns
    caps: dict[str, int] = field(default_factory=dict)  # declared, rollups too
    max_timeout: float | None = None  # rollups too
    explicit_calls: int = 0
    logical_calls: int = 0
    call_successes: int = 0
    causes: Counter[str] = field(default_factory=Counter)
    own_checked: int = 0  # attempts with a deadline (or timeout) of their own
    own_over: int = 0
    own_wasted: float = 0.0
    # Slot seconds of the attempts without a deadline of their own, once some attempt of
    # the minute has one (before that they are every attempt's latency: not kept twice).
    no_own_slots: list[Floats] = field(default_factory=list)
    tokens: dict[str, list[int]] = field(default_factory=dict)  # type -> [reported, sum]
    errors: Counter[str] = field(default_factory=Counter)
    flight: dict[str, Ints] = field(default_factory=dict)  # shard -> 60 samples
    depth: dict[str, Ints] = field(default_factory=dict)
    tool_held_ns: int = 0  # of the attempts ending in the minute
    tool_holding: int = 0  # attempts ending in the minute with tool-held time
    tool_spans: int = 0  # tool spans starting in the minute
    target_caps: dict[Target, int] = field(default_factory=dict)  # declared, rollups too
    # [ceil(start) min, ceil(end) max] in whole seconds of the attempts ending in the minute.
    target_bounds: dict[Target, list[int]] = field(default_factory=dict)
    target_flight: dict[Target, Ints] = field(default_factory=dict)  # 60 samples
    # The whole minute's sorted TTFT and latency, while one update emits the minute.
    whole: tuple[Floats, Ints] | None = field(default=None, repr=False, compare=False)
    # A value to take away was not held (cannot happen unless the flags went wrong):
    # the minute is read whole again.
    broken: bool = False

    def whole_values(self) -> tuple[Floats, Ints]:
        """Every shard's TTFT and latency values merged, sorted (kept until :meth:`done`)."""
        if self.whole is None:
            self.whole = (
                _whole(self.ttft.values(), _EMPTY_FLOATS),
                _whole(self.latency.values(), _EMPTY_INTS),
            )
        return self.whole

    def done(self) -> None:
        """Drop what :meth:`whole_values` made (the update that emitted the minute ended)."""
        self.whole = None

    def nbytes(self) -> int:
        """Bytes of the per-attempt values held (the rest is per shard)."""
        arrays = [*self.ttft.values(), *self.latency.values(), *self.no_own_slots]
        return sum(a.nbytes for a in arrays)

    def values_held(self) -> int:
        return sum(a.size for a in [*self.ttft.values(), *self.latency.values()])


def _declared(text: str) -> pl.Expr:
    value = pl.col(text).str.strip_chars().cast(pl.Float64, strict=False)
    return pl.when(value.is_finite() & (value > 0)).then(value)


def _cap_declared() -> pl.Expr:
    """A target cap as :func:`storage.readers.pitfall_attributes._cap` reads it: a positive whole
    number, else not declared."""
    value = _declared("target_cap_text")
    return pl.when(value == value.floor()).then(value).cast(pl.Int64)


def _fold_targets(
    states: Mapping[int, MinuteState], frame: pl.DataFrame, events: pl.DataFrame, sign: int
) -> None:
    """Target caps declared in ``frame`` (rollups too) and the bounds of ``events``'
    intervals per target (attempts with a model)."""
    if "target_cap_text" not in frame.columns:
        return
    declared = frame.select("minute_ns", "provider", "model", cap=_cap_declared()).filter(
        pl.col("cap").is_not_null()
    )
    for minute, provider, model, cap in (
        declared.group_by("minute_ns", "provider", "model").agg(pl.col("cap").max()).rows()
    ):
        caps = states[minute].target_caps
        caps[provider, model] = max(caps.get((provider, model), 0), int(cap))
    events = events.filter(pl.col("model").is_not_null())
    up, down, _ = sample_bounds(
        events.get_column("start_ns").to_numpy(), events.get_column("end_ns").to_numpy()
    )
    bounds = (
        events.with_columns(up=pl.Series(up), down=pl.Series(down))
        .group_by("minute_ns", "provider", "model")
        .agg(pl.col("up").min(), pl.col("down").max())
    )
    for minute, provider, model, up, down in bounds.rows():
        state, target = states[minute], (provider, model)
        held = state.target_bounds.get(target)
        if sign < 0:
            # A bound is a minimum / maximum: taking away the attempt that set it needs
            # the minute's other attempts (read whole again).
            if held is None or up <= held[0] or down >= held[1]:
                state.broken = True
        elif held is None:
            state.target_bounds[target] = [int(up), int(down)]
        else:
            held[0], held[1] = min(held[0], int(up)), max(held[1], int(down))


def fold_ending(states: Mapping[int, MinuteState], rows: pl.DataFrame, sign: int = 1) -> None:
    """Add (``sign`` -1: take away) the attempts of ``rows`` (flags known) that end in a
    minute of ``states``. Taking away is for attempts whose flags changed: they were
    added with their old flags, and come back with their new ones."""
    if rows.height == 0 or not states:
        return
    minutes = pl.Series(sorted(states), dtype=pl.Int64).implode()
    frame = rows.with_columns(minute_ns=(pl.col("end_ns") // MINUTE_NS) * MINUTE_NS).filter(
        pl.col("minute_ns").is_in(minutes)
    )
    if frame.height == 0:
        return
    _fold_targets(states, frame, frame.filter(pl.col("rollup") == 0), sign)
    declared = frame.filter(pl.col("concurrency_cap").is_not_null())
    for minute, shard, cap in (
        declared.group_by("minute_ns", "shard_id").agg(pl.col("concurrency_cap").max()).rows()
    ):
        caps = states[minute].caps
        caps[shard] = max(caps.get(shard, 0), int(cap))
    timeouts = frame.group_by("minute_ns").agg(_declared("timeout_text").max().alias("t"))
    for minute, timeout in timeouts.rows():
        if timeout is not None:
            state = states[minute]
            state.max_timeout = max(state.max_timeout or 0.0, float(timeout))
    ok = (pl.col("status") == "ok").fill_null(False)
    events = frame.filter(pl.col("rollup") == 0).with_columns(
        ok=ok,
        retry=(pl.coalesce("resend_count", "later_in_call") > 0).fill_null(False),
        evidence=pl.col("resend_count").is_not_null() | (pl.col("call_id_explicit") == 1),
        retried=(pl.col("call_id_explicit") == 1) & (pl.col("has_later") == 1),
        latency_ns=pl.col("end_ns") - pl.col("start_ns"),
        own=pl.coalesce(_declared("deadline_text"), _declared("timeout_text")),
        slot_s=(pl.col("end_ns") - pl.col("start_ns")) * (1 / 1e9),
    )
    if events.height == 0:
        return
    events = events.sort("minute_ns", "shard_id")
    # Per minute first: the first attempt with a deadline of its own makes the earlier
    # attempts' slots kept apart, from the latency values held before this fold.
    calls = events.group_by("minute_ns", maintain_order=True).agg(
        (pl.col("call_id_explicit") == 1).sum().alias("explicit"),
        (~pl.col("retried")).sum().alias("logical"),
        (~pl.col("retried") & pl.col("ok")).sum().alias("successes"),
        pl.col("own").is_not_null().sum().alias("own_checked"),
        (pl.col("own").is_not_null() & (pl.col("slot_s") > pl.col("own"))).sum().alias("over"),
        (pl.col("slot_s") - pl.col("own"))
        .filter(pl.col("slot_s") > pl.col("own"))
        .sum()
        .alias("wasted"),
        pl.col("own").is_null().sum().alias("no_own"),
    )
    slots = events.filter(pl.col("own").is_null()).get_column("slot_s").to_numpy()
    low = 0  # (events are sorted by minute: each minute's slots are one slice)
    for minute, explicit, logical, successes, checked, over, wasted, no_own in calls.rows():
        state = states[minute]
        if sign > 0 and checked and not state.own_checked:  # the first own deadline:
            slots_so_far = _whole(state.latency.values(), _EMPTY_INTS)  # slots kept apart
            state.no_own_slots = [latency_seconds(slots_so_far)] if slots_so_far.size else []
        part = slots[low : low + int(no_own or 0)]
        if no_own and (state.own_checked or (sign > 0 and checked)):
            if sign > 0:
                state.no_own_slots.append(part.copy())
            else:
                kept = _whole(state.no_own_slots, _EMPTY_FLOATS)
                state.no_own_slots = [_removed(kept, np.sort(part), state)]
        low += int(no_own or 0)
        state.explicit_calls += sign * int(explicit or 0)
        state.logical_calls += sign * int(logical or 0)
        state.call_successes += sign * int(successes or 0)
        state.own_checked += sign * int(checked or 0)
        state.own_over += sign * int(over or 0)
        state.own_wasted += sign * float(wasted or 0.0)
        if not state.own_checked:
            state.no_own_slots = []  # every slot is a latency value again
    cells = events.group_by("minute_ns", "shard_id", maintain_order=True).agg(
        pl.len().alias("calls_in_minute"),
        pl.col("prompt_tokens").fill_null(0).sum().alias("prompt_tpm_in"),
        pl.col("completion_tokens").fill_null(0).sum().alias("completion_tpm_out"),
        pl.col("ok").sum().alias("successes"),
        pl.col("retry").sum().alias("retries"),
        pl.col("queue_wait_s").is_not_null().sum().alias("queue_reports"),
        pl.col("evidence").sum().alias("evidence"),
    )
    # Rows are sorted by cell: each cell's values are one slice of the columns.
    ttft_valid = events.select(pl.col("ok") & pl.col("ttft_s").is_not_null()).to_series()
    ttft_all = events.get_column("ttft_s").fill_null(0.0).to_numpy()
    valid_all = ttft_valid.to_numpy()
    latency_all = events.get_column("latency_ns").to_numpy()
    low = 0
    for row in cells.iter_rows(named=True):
        state, shard = states[row["minute_ns"]], row["shard_id"]
        high = low + int(row["calls_in_minute"])
        added = sign * np.array([int(row[name] or 0) for name in SUMS], dtype=np.int64)
        state.sums[shard] = state.sums.get(shard, np.zeros(len(SUMS), np.int64)) + added
        ttft = ttft_all[low:high][valid_all[low:high]]
        ttft.sort(kind="stable")
        latency = latency_all[low:high].copy()
        latency.sort(kind="stable")
        if sign > 0:
            state.ttft[shard] = _merged(state.ttft.get(shard, _EMPTY_FLOATS), ttft)
            state.latency[shard] = _merged(state.latency.get(shard, _EMPTY_INTS), latency)
        else:
            state.ttft[shard] = _removed(state.ttft.get(shard, _EMPTY_FLOATS), ttft, state)
            state.latency[shard] = _removed(state.latency.get(shard, _EMPTY_INTS), latency, state)
        low = high
    del ttft_all, valid_all, latency_all
    causes = (
        events.filter(pl.col("retried") & ~pl.col("ok"))
        .group_by("minute_ns", pl.col("error_type").fill_null("error"))
        .len()
    )
    for minute, cause, count in causes.rows():
        states[minute].causes[str(cause)] += sign * int(count)
    for column, token_type in TOKEN_TYPES.items():
        reported = events.filter(pl.col(column).is_not_null())
        for minute, count, total in (
            reported.group_by("minute_ns").agg(pl.len(), pl.col(column).sum()).rows()
        ):
            held = states[minute].tokens.setdefault(token_type, [0, 0])
            held[0] += sign * int(count)
            held[1] += sign * int(total)
    failed = events.filter(pl.col("status") == "error")
    for minute, error_type, count in (
        failed.group_by("minute_ns", pl.col("error_type").fill_null("error")).len().rows()
    ):
        states[minute].errors[str(error_type)] += sign * int(count)
    if "tool_held_ns" in events.columns:
        holding = events.filter(pl.col("tool_held_ns") > 0)
        for minute, held, count in (
            holding.group_by("minute_ns").agg(pl.col("tool_held_ns").sum(), pl.len()).rows()
        ):
            states[minute].tool_held_ns += sign * int(held)
            states[minute].tool_holding += sign * int(count)


def _removed(held: npt.NDArray[Any], values: npt.NDArray[Any], state: MinuteState) -> Any:
    """Sorted ``held`` without one occurrence of each of the sorted ``values``."""
    if values.size == 0:
        return held
    # The i-th of k equal values is found i places after the first of its run in held.
    first = np.searchsorted(held, values, side="left")
    runs = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    rank = np.arange(values.size) - np.repeat(runs, np.diff(np.r_[runs, values.size]))
    at = first + rank
    found = at[-1] < held.size and np.array_equal(held[np.minimum(at, held.size - 1)], values)
    if not found:
        state.broken = True
        return held
    return np.delete(held, at)


def fold_overlap(states: Mapping[int, MinuteState], rows: pl.DataFrame, sign: int = 1) -> None:
    """Add the in-flight and queued seconds of the attempts of ``rows`` (flags known)
    within every minute of ``states``: the seal's samples
    (:mod:`analytics.kernels.second_samples`) at the minute's 60 whole seconds."""
    events = rows.filter(pl.col("rollup") == 0)
    if events.height == 0 or not states:
        return
    ids = events.get_column("shard_id")
    shards = ids.unique().sort().to_list()
    codes = ids.cast(pl.Enum(shards)).to_physical().cast(pl.Int64).to_numpy()
    began, ended, queued = sample_bounds(
        events.get_column("start_ns").to_numpy(),
        events.get_column("end_ns").to_numpy(),
        events.get_column("queue_wait_s").fill_null(-1.0).to_numpy(),
    )
    _overlap_targets(states, events, began, ended, sign)
    flights = _minute_samples(states, codes, began, ended, len(shards))
    depths = _minute_samples(states, codes, queued, began, len(shards))
    for (state, flight), (_, depth) in zip(flights, depths, strict=True):
        touched = np.flatnonzero(flight.any(axis=1) | depth.any(axis=1))
        for code in touched.tolist():
            shard = str(shards[code])
            zero = np.zeros(60, dtype=np.int64)
            state.flight[shard] = state.flight.get(shard, zero) + sign * flight[code]
            state.depth[shard] = state.depth.get(shard, zero) + sign * depth[code]


def _minute_samples(
    states: Mapping[int, MinuteState], codes: Ints, low: Ints, high: Ints, rows: int
) -> Iterator[tuple[MinuteState, Ints]]:
    """Per minute of ``states`` (in minute order), its ``(rows, 60)``
    :func:`~analytics.kernels.second_samples.window_samples`: one window per run of
    consecutive minutes, so the attempts are walked once per run, not once per minute."""
    minutes = sorted(states)
    while minutes:
        count = 1
        while count < len(minutes) and minutes[count] == minutes[0] + count * MINUTE_NS:
            count += 1
        first = minutes[0] // SECOND_NS
        samples = window_samples(codes, low, high, rows, first, 60 * count)
        for i in range(count):
            yield states[minutes[i]], samples[:, 60 * i : 60 * (i + 1)]
        minutes = minutes[count:]


def _overlap_targets(
    states: Mapping[int, MinuteState], events: pl.DataFrame, began: Ints, ended: Ints, sign: int
) -> None:
    """In-flight per (provider, model) target at each whole second of every minute of
    ``states`` (the samples of :mod:`analytics.kernels.second_samples`, as the sealed
    target saturation's)."""
    if "model" not in events.columns:
        return
    known = events.get_column("model").is_not_null().to_numpy()
    if not known.any():
        return
    keys = events.filter(pl.col("model").is_not_null()).select(
        key=pl.concat_str(pl.col("provider").fill_null("\x00"), "model", separator="\x1f")
    )
    names = keys.get_column("key").unique().sort().to_list()
    codes = keys.get_column("key").cast(pl.Enum(names)).to_physical().cast(pl.Int64).to_numpy()
    targets: list[Target] = []
    for name in names:
        provider, _, model_name = name.partition("\x1f")
        targets.append((None if provider == "\x00" else provider, model_name))
    for state, flight in _minute_samples(states, codes, began[known], ended[known], len(names)):
        for code in np.flatnonzero(flight.any(axis=1)).tolist():
            target = targets[code]
            zero = np.zeros(60, dtype=np.int64)
            state.target_flight[target] = (
                state.target_flight.get(target, zero) + sign * flight[code]
            )


def _whole(arrays: Iterable[npt.NDArray[Any]], empty: npt.NDArray[Any]) -> npt.NDArray[Any]:
    parts = [a for a in arrays if a.size]
    if not parts:
        return empty
    joined = np.concatenate(parts)
    joined.sort(kind="stable")
    return joined
