"""What bounds the run's throughput, in words (docs/metrics.md#bottleneck).

The verdict, the reason with its figures, the minutes that carry the evidence and the
thresholds it used; "not measured" with the reason when the telemetry cannot tell.
"""

from __future__ import annotations

from typing import Any

import dash_bootstrap_components as dbc
from dash import html

from tpmledger.analytics.verdicts.bottleneck import counted_words
from tpmledger.dashboard.display import NOT_MEASURED

VERDICT_WORDS = {
    "provider_quota": "the provider's quota",
    "serving": "the serving side",
    "concurrency_cap": "the concurrency cap",
    "demand": "demand (the workers' own offered load)",
}
_COLORS = {"provider_quota": "danger", "serving": "danger", "concurrency_cap": "primary"}


def verdict_words(bottleneck: dict[str, Any] | None) -> str:
    """A verdict as a short phrase (the sweep page's column too)."""
    if not bottleneck or bottleneck.get("verdict") is None:
        return NOT_MEASURED
    return VERDICT_WORDS.get(bottleneck["verdict"], str(bottleneck["verdict"]))


def minutes_text(minutes: list[str], shown: int = 8) -> str:
    """``HH:MM`` of the evidence minutes, the first ``shown`` of them."""
    text = ", ".join(m[11:16] for m in minutes[:shown])
    return text + (f" … ({len(minutes)} minutes)" if len(minutes) > shown else "") + " UTC"


def bottleneck_panel(
    bottleneck: dict[str, Any] | None, run_attempts: int | None = None
) -> dbc.Alert:
    """The verdict panel of the run page (id ``run-bottleneck``); ``run_attempts`` (the
    header's count) is set beside the inner-minute attempts the verdict counted."""
    if not bottleneck:
        body: list[Any] = [html.Strong("Bottleneck: "), f"{NOT_MEASURED} yet."]
        return dbc.Alert(body, color="secondary", id="run-bottleneck", className="py-2 small")
    verdict = bottleneck.get("verdict")
    live = " (live: over the minutes so far)" if bottleneck.get("live") else ""
    head = (
        f"Throughput is bounded by {verdict_words(bottleneck)}{live}"
        if verdict
        else f"Bottleneck: {NOT_MEASURED}{live}"
    )
    minutes = bottleneck.get("minutes") or []
    params = bottleneck.get("params") or {}
    reason = str(bottleneck.get("reason") or "").rstrip(".")
    lines: list[Any] = [html.Strong(head + ". "), f"{reason}." if reason else ""]
    if minutes:
        lines += [html.Br(), f"Evidence minutes: {minutes_text(minutes)}."]
    counted = counted_words(bottleneck, run_attempts)
    if counted:
        lines += [html.Br(), html.Span(counted, id="run-bottleneck-counted")]
    if params:
        shown = ", ".join(f"{k} {v}" for k, v in params.items())
        lines += [html.Br(), html.Span(f"Thresholds: {shown}.", className="text-body-secondary")]
    color = _COLORS.get(verdict or "", "secondary")
    return dbc.Alert(lines, color=color, id="run-bottleneck", className="py-2 small")
