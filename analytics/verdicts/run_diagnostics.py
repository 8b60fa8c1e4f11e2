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

Computed from a run's events and its stored declarations when a version is sealed. The
three attempt figures are folds (:class:`DeadlineOverrun`, :class:`SlotHeldByTool`,
:class:`TargetSaturation`: ``add`` every slice of the run's attempts once, then
``figures``), so a streaming seal computes them chunk by chunk
(:mod:`analytics.seal.sealed_figures_stream`); the whole-run functions add one slice.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl

from tpmledger.analytics.kernels.diagnostic_figures import (
    deadline_overrun_figures,
    slot_held_by_tool_figures,
    target_saturation_figures,
)
from tpmledger.analytics.kernels.diagnostic_params import (
    diagnostics_params as diagnostics_params,  # the seal imports it from here
)
from tpmledger.analytics.kernels.figure_rules import (
    DEFAULT_RETRY_BUDGET,
    retry_storm_result,
)
from tpmledger.analytics.kernels.second_samples import sample_bounds
from tpmledger.analytics.kernels.tool_overlap import tool_held_ns
from tpmledger.durations import SECOND_NS
from tpmledger.storage.codecs.time_text import minute_text_ns
from tpmledger.storage.readers.pitfall_attributes import Declarations, Target

_KEY: Final = ["trace_id", "span_id"]

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
    rows = whole.select("minute_ns", "calls_in_minute", "retries").iter_rows()
    return retry_storm_result(((minute_text_ns(m), c, r) for m, c, r in rows), budget)


def _keys(events: pl.DataFrame) -> pl.DataFrame:
    return events.select("trace_id", "span_id", "start_ns", "end_ns")


def _key_hash() -> pl.Expr:
    return pl.struct(*_KEY).hash()


class AttemptLookup:
    """Columns declared per attempt (one row per key), found by (trace_id, span_id).

    The keys are hashed and sorted once, so :meth:`find` costs time in the rows it is
    given only: a streaming seal finds each chunk's attempts without hashing the run's
    whole table again, as a join per chunk would. Keys whose hash another key shares
    (rare) are found by a join on those few.
    """

    def __init__(self, keys: Sequence[tuple[Any, ...]], values: dict[str, pl.Series]) -> None:
        """``values`` per attempt of ``keys`` (tuples that start with trace_id, span_id)."""
        table = (
            pl.DataFrame(
                {
                    "trace_id": pl.Series([k[0] for k in keys], dtype=pl.String),
                    "span_id": pl.Series([k[1] for k in keys], dtype=pl.String),
                    **values,
                }
            )
            .with_columns(found=pl.lit(True), hash=_key_hash())
            .sort("hash")
        )
        hashes = table.get_column("hash")
        self._hashes = hashes.to_numpy()
        self._keys = table.select(*_KEY)
        self._values = table.drop(*_KEY, "hash")
        # A key given twice shares its hash too: the join keeps one row of it.
        self._shared = (
            self._keys.with_row_index("row")
            .filter(hashes.is_duplicated())
            .unique(subset=_KEY, keep="last", maintain_order=True)
        )

    def find(self, events: pl.DataFrame) -> pl.DataFrame:
        """Per row of ``events``: ``found`` and the table's other columns (null if not found)."""
        keys = events.select(*_KEY)
        rows = pl.Series("row", dtype=pl.Int64).clear(keys.height)
        if self._hashes.size:
            probe = keys.select(_key_hash()).to_series().to_numpy()
            at = pl.Series(np.searchsorted(self._hashes, probe).clip(max=self._hashes.size - 1))
            same = (self._keys.get_column("trace_id").gather(at) == keys.get_column("trace_id")) & (
                self._keys.get_column("span_id").gather(at) == keys.get_column("span_id")
            )
            rows = pl.select(pl.when(same).then(at)).to_series()
        if self._shared.height:
            rare = keys.join(self._shared, on=_KEY, how="left", maintain_order="left")
            rows = pl.select(pl.coalesce(rows, rare.get_column("row").cast(pl.Int64))).to_series()
        found = self._values.select(pl.all().gather(rows))
        return found.with_columns(pl.col("found").fill_null(False))


class DeadlineOverrun:
    """The deadline overrun folded over slices of a run's attempts (:meth:`add` each once).

    Each attempt's deadline is its own, else its request timeout, else the run's largest.
    Kept: attempts with a deadline, those over it and the seconds held past it.
    """

    def __init__(self, declared: Declarations) -> None:
        keys = [*declared.deadlines, *(k for k in declared.timeouts if k not in declared.deadlines)]
        self._lookup = AttemptLookup(
            keys,
            {
                "deadline": pl.Series([declared.deadlines.get(k) for k in keys], dtype=pl.Float64),
                "timeout": pl.Series([declared.timeouts.get(k) for k in keys], dtype=pl.Float64),
            },
        )
        self._run_timeout = max(declared.timeouts.values()) if declared.timeouts else None
        self.attempts, self.over, self.wasted_s = 0, 0, 0.0

    @classmethod
    def of(cls, declared: Declarations) -> DeadlineOverrun | None:
        """``None`` when nothing declares a deadline (the overrun is not measured)."""
        return cls(declared) if declared.deadlines or declared.timeouts else None

    def add(self, events: pl.DataFrame) -> None:
        """Fold in ``events``: a slice of the run's attempts, none of them added before."""
        frame = (
            _keys(events)
            .hstack(self._lookup.find(events))
            .select(
                # Times the reciprocal whatever the slice's length (see goodput._good).
                slot_s=(pl.col("end_ns") - pl.col("start_ns")) * (1 / SECOND_NS),
                limit=pl.coalesce(
                    "deadline", "timeout", pl.lit(self._run_timeout, dtype=pl.Float64)
                ),
            )
            .filter(pl.col("limit").is_not_null())
        )
        over = frame.filter(pl.col("slot_s") > pl.col("limit"))
        self.attempts += frame.height
        self.over += over.height
        self.wasted_s += float((over.get_column("slot_s") - over.get_column("limit")).sum())

    def figures(self) -> dict[str, Any] | None:
        """The published overrun; ``None`` when no attempt added has a deadline."""
        return deadline_overrun_figures(self.attempts, self.over, self.wasted_s)


def deadline_overrun(events: pl.DataFrame, declared: Declarations) -> dict[str, Any] | None:
    """Share of attempts with a deadline that held their slot past it, and the waste."""
    overrun = DeadlineOverrun.of(declared)
    if overrun is None:
        return None
    overrun.add(events)
    return overrun.figures()


class SlotHeldByTool:
    """Tool time in slots folded over slices of a run's attempts (:meth:`add` each once).

    The tool spans are sorted by start once: a slice joins only the tools that can overlap
    it (started before its last end, after its first start − the longest tool), not every
    tool of the run. Kept: slot and tool-held nanoseconds, attempts holding for tools.
    """

    def __init__(self, tools: Sequence[tuple[str, int, int]]) -> None:
        self._tools = pl.DataFrame(
            {
                "trace_id": [t[0] for t in tools],
                "tool_start": [t[1] for t in tools],
                "tool_end": [t[2] for t in tools],
            },
            schema={"trace_id": pl.String, "tool_start": pl.Int64, "tool_end": pl.Int64},
        ).sort("tool_start")
        self._starts = self._tools.get_column("tool_start").to_numpy()
        held = self._tools.get_column("tool_end") - self._tools.get_column("tool_start")
        self._longest = max(int(held.max() or 0), 0)  # type: ignore[arg-type]
        self.slot_ns, self.held_ns, self.attempts_holding = 0, 0, 0

    @classmethod
    def of(cls, tools: Sequence[tuple[str, int, int]]) -> SlotHeldByTool | None:
        """``None`` when the run stored no tool span (the share is not measured)."""
        return cls(tools) if tools else None

    def _near(self, slots: pl.DataFrame) -> pl.DataFrame:
        if slots.height == 0:
            return self._tools.clear()
        first = int(slots.get_column("start_ns").min()) - self._longest  # type: ignore[arg-type]
        last = int(slots.get_column("end_ns").max())  # type: ignore[arg-type]
        lo, hi = np.searchsorted(self._starts, [first, last])
        return self._tools.slice(int(lo), int(hi - lo))

    def add(self, events: pl.DataFrame) -> None:
        """Fold in ``events``: a slice of the run's attempts, none of them added before."""
        slots = _keys(events)
        held = tool_held_ns(slots, self._near(slots))
        self.slot_ns += int((slots.get_column("end_ns") - slots.get_column("start_ns")).sum())
        self.held_ns += int(held.sum())
        self.attempts_holding += int((held > 0).sum())

    def figures(self) -> dict[str, Any]:
        """The published tool share of the slots added."""
        return slot_held_by_tool_figures(
            self.slot_ns, self.held_ns, self._tools.height, self.attempts_holding
        )


def slot_held_by_tool(
    events: pl.DataFrame, tools: Sequence[tuple[str, int, int]]
) -> dict[str, Any] | None:
    """Tool-seconds inside slot intervals of the same trace, as a share of slot-seconds."""
    held = SlotHeldByTool.of(tools)
    if held is None:
        return None
    held.add(events)
    return held.figures()


def _levels(starts: np.ndarray, ends: np.ndarray) -> tuple[int, dict[int, int]]:
    """In-flight at whole seconds t with start ≤ t < end (the samples'
    :func:`~analytics.kernels.second_samples.sample_bounds`), as a step function: the
    seconds from the first start to the last end and the seconds spent at each level.
    Steps, not a sample per second: the run's attempts can span years; the live path counts
    the same levels in each minute's 60 samples (:mod:`analytics.live.minute_state`)."""
    up, down, _ = sample_bounds(starts, ends)
    times = np.concatenate([up, down])
    steps = np.concatenate([np.ones(up.size, np.int64), -np.ones(down.size, np.int64)])
    order = np.lexsort((steps, times))
    times, level = times[order], np.cumsum(steps[order])
    lengths = np.diff(times)  # level[i] holds from times[i] to times[i + 1]
    level = level[:-1]
    levels: dict[int, int] = {}
    for value, length in zip(level.tolist(), lengths.tolist(), strict=True):
        if length > 0:
            levels[value] = levels.get(value, 0) + length
    return int(lengths.sum()), levels


class TargetSaturation:
    """In-flight against target caps folded over slices of a run's attempts (:meth:`add`
    each once). Kept: the (start_ns, end_ns) of the attempts to capped targets only."""

    def __init__(
        self,
        caps: dict[Target, int],
        target_attempts: Sequence[tuple[str, str, str | None, str | None]],
    ) -> None:
        self._caps = caps
        self._lookup = AttemptLookup(
            target_attempts,
            {
                "provider": pl.Series([a[2] for a in target_attempts], dtype=pl.String),
                "target_model": pl.Series([a[3] for a in target_attempts], dtype=pl.String),
            },
        )
        self._slots: dict[Target, list[npt.NDArray[np.int64]]] = {t: [] for t in caps}

    @classmethod
    def of(
        cls,
        caps: dict[Target, int],
        target_attempts: Sequence[tuple[str, str, str | None, str | None]],
    ) -> TargetSaturation | None:
        """``None`` when no target declares a cap (saturation is not measured)."""
        return cls(caps, target_attempts) if caps else None

    def add(self, events: pl.DataFrame) -> None:
        """Fold in ``events``: a slice of the run's attempts, none of them added before."""
        joined = (
            events.select("start_ns", "end_ns")
            .hstack(self._lookup.find(events))
            .filter(pl.col("found"))
        )
        for (provider, model), slots in self._slots.items():
            mine = joined.filter(
                pl.col("provider").eq_missing(provider) & pl.col("target_model").eq_missing(model)
            )
            slots.append(mine.select("start_ns", "end_ns").to_numpy())

    def figures(self) -> list[dict[str, Any]]:
        """In-flight against each cap, over the attempts added."""
        out = []
        for (provider, model), cap in sorted(
            self._caps.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))
        ):
            slots = np.concatenate([np.zeros((0, 2), np.int64), *self._slots[provider, model]])
            seconds, levels = _levels(slots[:, 0], slots[:, 1])
            out.append(target_saturation_figures(provider, model, cap, seconds, levels))
        return out


def target_saturation(
    events: pl.DataFrame,
    caps: dict[Target, int],
    target_attempts: Sequence[tuple[str, str, str | None, str | None]],
) -> list[dict[str, Any]] | None:
    """In-flight against the declared cap of each (provider, model) target."""
    saturation = TargetSaturation.of(caps, target_attempts)
    if saturation is None:
        return None
    saturation.add(events)
    return saturation.figures()
