"""The figures sealed beside a version, folded chunk by chunk (docs/provenance.md#streaming-seal).

:class:`SealedFiguresStream` computes what
:func:`analytics.sealed_figures.compute_sealed_figures` computes from a whole run's events,
from one :class:`~analytics.seal_chunk.SealChunk` after another instead, keeping only:

- deadline overrun and tool-held slot time: the sums of
  :class:`~analytics.run_diagnostics.DeadlineOverrun` and
  :class:`~analytics.run_diagnostics.SlotHeldByTool`;
- target saturation: the (start_ns, end_ns) of the attempts to capped targets only
  (:class:`~analytics.run_diagnostics.TargetSaturation`);
- minute outcomes and goodput: per-minute counts, and the run's attempt and TTFT counts.

So the state follows the run's minutes, not its attempts. ``reach`` is not read: each of
these figures needs an attempt once, in the chunk its end falls in. The run's declarations,
tool spans and target attempts are read once, when the stream starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import polars as pl
from sqlalchemy.orm import Session

from tpmledger.analytics.seal.seal_chunk import SealChunk
from tpmledger.analytics.seal.sealed_figures import SealedFigures
from tpmledger.analytics.verdicts.goodput import goodput_figures, goodput_minutes
from tpmledger.analytics.verdicts.minute_outcomes import (
    STALL_HTTP_TYPES,
    STALL_MARKERS,
    final_attempts,
    outcome_columns,
    outcome_counts,
    stall_ends,
)
from tpmledger.analytics.verdicts.run_diagnostics import (
    DEFAULT_RETRY_BUDGET,
    DeadlineOverrun,
    SlotHeldByTool,
    TargetSaturation,
    diagnostics_params,
    retry_storm,
)
from tpmledger.durations import MINUTE_NS
from tpmledger.slo import Slo
from tpmledger.storage.readers.pitfall_attributes import (
    Declarations,
    fetch_declarations,
    fetch_target_attempts,
)
from tpmledger.storage.server.database import driver_connection
from tpmledger.storage.writers.tool_span_store import fetch_run_tool_intervals

ToolIntervals = Sequence[tuple[str, int, int]]  # (trace_id hex, start_ns, end_ns)
TargetRows = Sequence[tuple[str, str, str | None, str | None]]  # (trace, span, provider, model)

# Rows of the per-minute counts: the minute outcomes with call ids (last attempts), then
# without (every attempt final); the stall row is the same in both.
_LAST: Final = slice(0, 3)
_EVERY: Final = slice(3, 6)


def read_figure_inputs(
    session: Session, run_id: str
) -> tuple[Declarations, ToolIntervals, TargetRows]:
    """The run's declarations, tool intervals and attempts to capped targets, read once in
    ``session`` (the caller opens it: ``in_one_snapshot(url, read_figure_inputs, run_id)``)."""
    conn = driver_connection(session)
    declared = fetch_declarations(conn, run_id)
    tools = fetch_run_tool_intervals(conn, run_id)
    models = sorted({m for _, m in declared.target_caps if m is not None})
    targets = fetch_target_attempts(conn, run_id, models) if models else []
    return declared, tools, targets


def sealed_params() -> dict[str, Any]:
    """How the sealed figures were computed; stored and printed with them."""
    return {
        **diagnostics_params(DEFAULT_RETRY_BUDGET),
        "stall_error_markers": list(STALL_MARKERS),
        "stall_http_types": list(STALL_HTTP_TYPES),
    }


class SealedFiguresStream:
    """Diagnostics, minute outcomes and goodput of a run fed as :class:`SealChunk`\\ s.

    Start one with :meth:`from_inputs` over :func:`read_figure_inputs`; feed every chunk
    of the run with :meth:`add` (in increasing minute order), then call
    :meth:`finish` once; the figures equal those of the whole run's events.
    """

    @classmethod
    def from_inputs(
        cls, declared: Declarations, tools: ToolIntervals, targets: TargetRows, slo: Slo | None
    ) -> SealedFiguresStream:
        """A stream over inputs already read (as :func:`read_figure_inputs` returns them)."""
        stream = cls.__new__(cls)
        stream._start(declared, tools, targets, slo)
        return stream

    def _start(
        self, declared: Declarations, tools: ToolIntervals, targets: TargetRows, slo: Slo | None
    ) -> None:
        self._slo = slo
        self._overrun = DeadlineOverrun.of(declared)
        self._held = SlotHeldByTool.of(tools)
        self._saturation = TargetSaturation.of(declared.target_caps, targets)
        self._minutes: list[tuple[int, npt.NDArray[np.int64]]] = []  # (low_ns, rows × minutes)
        self._goodput: list[pl.DataFrame] = []  # goodput_minutes of each chunk
        self._attempts = 0
        self._ttft_reported = 0
        self._end_range: tuple[int, int] | None = None  # (first, last) end_ns of the run

    def add(self, chunk: SealChunk) -> None:
        """Fold ``chunk`` into the running sums and per-minute counts."""
        events = chunk.events
        for fold in (self._overrun, self._held, self._saturation):
            if fold is not None:
                fold.add(events)
        every = final_attempts(events, explicit=False)
        finals = every.filter(pl.Series(chunk.call_last, dtype=pl.Boolean))
        stalls = stall_ends(events)
        low, n = chunk.low_ns, chunk.minute_count
        counts = [outcome_counts(stalls, finals, low, n), outcome_counts(stalls, every, low, n)]
        self._minutes.append((low, np.vstack(counts)))
        if self._slo is not None:
            self._goodput.append(goodput_minutes(events, self._slo))
        self._attempts += events.height
        self._ttft_reported += events.height - events.get_column("ttft_s").null_count()
        if events.height:
            end = events.get_column("end_ns")
            first, last = int(end.min()), int(end.max())  # type: ignore[arg-type]
            if self._end_range is not None:
                first, last = min(first, self._end_range[0]), max(last, self._end_range[1])
            self._end_range = (first, last)

    def finish(
        self,
        whole_minutes: pl.DataFrame,
        work_conserving: dict[str, Any] | None,
        explicit_call_ids: bool,
    ) -> SealedFigures:
        """The sealed figures of every chunk added.

        ``whole_minutes`` is the whole-run minute table sorted by ``minute_ns`` (for the
        retry storm), ``work_conserving`` the run's check, ``explicit_call_ids`` whether the
        run sets call ids (otherwise every attempt is its own call).
        """
        diagnostics = {
            "retry_storm": retry_storm(whole_minutes, DEFAULT_RETRY_BUDGET),
            "deadline_overrun": None if self._overrun is None else self._overrun.figures(),
            "slot_held_by_tool": None if self._held is None else self._held.figures(),
            "target_saturation": None if self._saturation is None else self._saturation.figures(),
            "work_conserving": work_conserving,
        }
        goodput = {}
        if self._slo is not None:
            per_minute = pl.concat(self._goodput) if self._goodput else pl.DataFrame()
            goodput[self._slo.text] = goodput_figures(
                self._slo,
                per_minute,
                attempts=self._attempts,
                reports_ttft=self._ttft_reported > 0,
            )
        return SealedFigures(
            diagnostics, self._outcomes(explicit_call_ids), sealed_params(), goodput
        )

    def _outcomes(self, explicit_call_ids: bool) -> dict[str, Any]:
        if self._end_range is None:
            return outcome_columns(0, np.zeros((3, 0), np.int64))
        first = self._end_range[0] // MINUTE_NS * MINUTE_NS
        n = (self._end_range[1] - first) // MINUTE_NS + 1
        counts = np.zeros((6, n), np.int64)
        for low, part in self._minutes:
            at = (low - first) // MINUTE_NS  # chunks' minutes outside the run's add nothing
            lo, hi = max(at, 0), min(at + part.shape[1], n)
            if hi > lo:
                counts[:, lo:hi] += part[:, lo - at : hi - at]
        return outcome_columns(first, counts[_LAST if explicit_call_ids else _EVERY])
