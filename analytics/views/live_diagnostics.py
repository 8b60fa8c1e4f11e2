"""The diagnostics of a live run (docs/metrics.md#diagnostics), over the closed and sealed
minutes of its current table (:mod:`analytics.views.current_table`): the retry storm and
the work-conserving check from the minute rows; the deadline overrun, tool-held slots and
target saturation from the per-minute sums of its run facts.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tpmledger.analytics.kernels.diagnostic_figures import (
    deadline_overrun_figures,
    slot_held_by_tool_figures,
    target_saturation_figures,
)
from tpmledger.analytics.kernels.figure_rules import DEFAULT_RETRY_BUDGET, retry_storm_result
from tpmledger.analytics.views.current_table import SETTLED, CurrentTable
from tpmledger.storage.codecs.time_text import minute_text
from tpmledger.storage.schema.minute_keys import WHOLE_RUN


def live_diagnostics(table: CurrentTable) -> dict[str, Any]:
    """The diagnostics of a live run over its closed and sealed minutes (``"live": true``):
    the retry storm and the work-conserving check from its minute rows; the deadline
    overrun, tool-held slots and target saturation from per-minute sums in its run facts
    (analytics/live/minute_state.py), the same arithmetic as the sealed figures."""
    whole = [r for r in table.shard_rows(WHOLE_RUN) if r["state"] in SETTLED]
    storm = None
    if table.retries_measured and whole:
        storm = retry_storm_result(
            ((minute_text(r["minute_utc"]), r["calls_in_minute"], r["retries"]) for r in whole),
            DEFAULT_RETRY_BUDGET,
        )
    return {
        "live": True,
        "through_minute_utc": minute_text(whole[-1]["minute_utc"]) if whole else None,
        "retry_storm": storm,
        "deadline_overrun": _deadline_overrun(table, {r["minute_utc"] for r in whole}),
        "slot_held_by_tool": _slot_held_by_tool(table, {r["minute_utc"] for r in whole}),
        "target_saturation": _target_saturation(table, {r["minute_utc"] for r in whole}),
        "work_conserving": table.work_conserving,
    }


def _facts_cover(table: CurrentTable, column: str) -> bool:
    """Whether the run facts count every attempt of the minute rows and all carry
    ``column`` (rows written before it existed do not)."""
    facts = table.run_facts
    attempts = sum(r["calls_in_minute"] for r in table.shard_rows(WHOLE_RUN))
    return sum(f["attempts"] for f in facts) == attempts and all(
        f.get(column) is not None for f in facts
    )


def _slot_held_by_tool(table: CurrentTable, settled: set[datetime]) -> dict[str, Any] | None:
    """Tool-held slot time over the settled minutes (attempts ending in them), from the
    facts' sums; null when the run stored no tool span or the facts miss attempts."""
    if not _facts_cover(table, "tools"):
        return None
    facts = table.run_facts
    tool_spans = sum(f["tools"]["tool_spans"] for f in facts)
    if tool_spans == 0:
        return None
    mine = [f["tools"] for f in facts if f["minute_utc"] in settled]
    return slot_held_by_tool_figures(
        sum(t["slot_ns"] for t in mine),
        sum(t["held_ns"] for t in mine),
        tool_spans,
        sum(t["holding"] for t in mine),
    )


def _target_saturation(table: CurrentTable, settled: set[datetime]) -> list[dict[str, Any]] | None:
    """In-flight against each declared target cap over the settled minutes: the seconds
    from the least start to the largest end second of the target's attempts, the level
    histogram summed over minutes; null when no target declares a cap."""
    if not _facts_cover(table, "targets"):
        return None
    caps: dict[tuple[Any, Any], int] = {}
    for f in table.run_facts:
        for t in f["targets"]:
            if t["cap"] is not None:
                key = (t["provider"], t["model"])
                caps[key] = max(caps.get(key, 0), t["cap"])
    if not caps:
        return None
    out = []
    for (provider, model), cap in sorted(
        caps.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))
    ):
        lows: list[int] = []
        highs: list[int] = []
        levels: dict[int, int] = {}
        for f in table.run_facts:
            if f["minute_utc"] not in settled:
                continue
            for t in f["targets"]:
                if (t["provider"], t["model"]) != (provider, model):
                    continue
                # The bounds of its attempts ending here, and of the seconds in flight
                # here (an attempt ending in an open minute is not in the first).
                for low, high in ((t["first"], t["last"]), tuple(t["busy"] or (None, None))):
                    if low is not None:
                        lows.append(low)
                        highs.append(high)
                for level, seconds in t["levels"]:
                    levels[level] = levels.get(level, 0) + seconds
        seconds = max(highs) - min(lows) if lows else 0
        out.append(target_saturation_figures(provider, model, cap, seconds, levels))
    return out


def _deadline_overrun(table: CurrentTable, settled: set[datetime]) -> dict[str, Any] | None:
    """The deadline overrun over the settled minutes, from their run facts' sums; null
    when nothing declares a deadline, the facts miss attempts, or a minute was checked
    against an older run-wide timeout (it is queued again and recomputed)."""
    facts = table.run_facts
    attempts = sum(r["calls_in_minute"] for r in table.shard_rows(WHOLE_RUN))
    if sum(f["attempts"] for f in facts) != attempts:
        return None
    limit = max((f["max_timeout_s"] for f in facts if f["max_timeout_s"] is not None),
                default=None)  # fmt: skip
    checked = over = 0
    wasted = 0.0
    for f in facts:
        fold = f["deadline"]
        if fold["without_own"] and fold["limit"] != limit:
            return None
        if f["minute_utc"] in settled:
            checked, over = checked + fold["attempts"], over + fold["over"]
            wasted += fold["wasted_s"]
    return deadline_overrun_figures(checked, over, wasted)
