"""The published objects of the cap-selection diagnostics from their sums: one formula each
(docs/metrics.md#diagnostics).

The seal folds a run's attempts into sums (:mod:`analytics.verdicts.run_diagnostics`); the
live path keeps the same sums per minute (:mod:`analytics.live.minute_state`) and adds the
settled minutes' (:mod:`analytics.views.live_diagnostics`). Both turn their sums into the
published figures here, so the two differ only in the attempts summed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpmledger.analytics.kernels.figure_registry import figure
from tpmledger.analytics.kernels.figure_rules import clean
from tpmledger.durations import SECOND_NS

SATURATION_FIELDS = ("seconds", "in_flight_mean", "in_flight_max", "share_at_cap", "share_over_cap")


@figure("deadline_overrun")
def deadline_overrun_figures(checked: int, over: int, wasted_s: float) -> dict[str, Any] | None:
    """Of ``checked`` attempts with a deadline, ``over`` held their slot past it, wasting
    ``wasted_s`` slot-seconds; None when no attempt had a deadline."""
    if checked == 0:
        return None
    result: dict[str, Any] = clean(
        {
            "share": over / checked,
            "slot_seconds_wasted": wasted_s,
            "attempts_with_deadline": checked,
            "attempts_over_deadline": over,
        }
    )
    return result


@figure("slot_held_by_tool")
def slot_held_by_tool_figures(
    slot_ns: int, held_ns: int, tool_spans: int, attempts_holding: int
) -> dict[str, Any]:
    """Tool-held slot time as a share of all slot time (nanosecond sums)."""
    slot_seconds, held = float(slot_ns), float(held_ns)
    result: dict[str, Any] = clean(
        {
            "share": held / slot_seconds if slot_seconds else None,
            "tool_slot_seconds": held / SECOND_NS,
            "slot_seconds": slot_seconds / SECOND_NS,
            "tool_spans": tool_spans,
            "attempts_holding_for_tools": attempts_holding,
        }
    )
    return result


@figure("target_saturation")
def target_saturation_figures(
    provider: Any, model: Any, cap: int, seconds: int, levels: Mapping[int, int]
) -> dict[str, Any]:
    """In-flight against a target's cap from the seconds spent at each level over
    ``seconds`` (whole seconds from the first start to the last end)."""
    figures: dict[str, Any] = dict.fromkeys(SATURATION_FIELDS)
    if seconds > 0:
        figures = {
            "seconds": seconds,
            "in_flight_mean": float(sum(v * n for v, n in levels.items()) / seconds),
            "in_flight_max": max((v for v, n in levels.items() if n > 0), default=0),
            "share_at_cap": float(sum(n for v, n in levels.items() if v >= cap) / seconds),
            "share_over_cap": float(sum(n for v, n in levels.items() if v > cap) / seconds),
        }
    result: dict[str, Any] = clean({"provider": provider, "model": model, "cap": cap, **figures})
    return result
