"""The run page's pitfall diagnostics and goodput (docs/metrics.md#diagnostics, #goodput).

Each line says what the telemetry supports: a figure, or "not measured" with the reason;
never a false 0.
"""

from __future__ import annotations

from typing import Any

import dash_bootstrap_components as dbc
from dash import html

from tpmledger.dashboard.display import NOT_MEASURED, fmt_int, fmt_rate


def _retry_storm(storm: dict[str, Any] | None) -> str:
    if storm is None:
        return f"{NOT_MEASURED} (retries are not measured)"
    minutes = storm.get("minutes") or []
    budget = fmt_rate(storm.get("budget"), 0)
    if not storm.get("flag"):
        return f"none: retries stayed within the retry budget ({budget} of first attempts)"
    shown = ", ".join(str(m)[11:16] for m in minutes[:8]) + (" …" if len(minutes) > 8 else "")
    return f"YES in {len(minutes)} minute(s) over the {budget} retry budget: {shown} UTC"


def _deadline(overrun: dict[str, Any] | None) -> str:
    if overrun is None:
        return f"{NOT_MEASURED} (no attempt declares a deadline or request timeout)"
    return (
        f"{fmt_rate(overrun.get('share'))} of attempts with a deadline held their slot past it; "
        f"{fmt_int(overrun.get('slot_seconds_wasted'))} slot-seconds wasted"
    )


def _tools(held: dict[str, Any] | None) -> str:
    if held is None:
        return f"{NOT_MEASURED} (the run stored no tool span)"
    return f"{fmt_rate(held.get('share'))} of slot-seconds were spent waiting on tools"


def _targets(targets: list[dict[str, Any]] | None) -> str:
    if not targets:
        return f"{NOT_MEASURED} (no target declares tpmledger.target.concurrency.cap)"
    return "; ".join(
        f"{t.get('provider') or '?'}/{t.get('model') or '?'}: cap {t.get('cap')}, at or over it "
        f"{fmt_rate(t.get('share_at_cap'))} of seconds, over it {fmt_rate(t.get('share_over_cap'))}"
        for t in targets
    )


def _goodput(run: dict[str, Any]) -> str:
    goodput = run.get("goodput")
    if goodput is None:
        return "no SLO declared (TPMLEDGER_SLO, or tpmledger analyze RUN --slo ttft=…,latency=…)"
    if run.get("good_call_share") is None:
        return f"under {goodput.get('slo')}: {NOT_MEASURED} ({goodput.get('not_measured_because')})"
    return (
        f"under {goodput.get('slo')}: {fmt_int(run.get('goodput_tpm_total'))} good tokens per "
        f"minute (sustained), {fmt_rate(run.get('good_call_share'))} of attempts met the SLO"
    )


def _live_lines(diagnostics: dict[str, Any]) -> list[tuple[str, str]]:
    """A live run's: every diagnostic over its closed minutes (docs/metrics.md#diagnostics)."""
    through = diagnostics.get("through_minute_utc")
    storm = diagnostics.get("retry_storm")
    if through is None:
        storm_text = "not measured yet: the first minutes are still in progress"
    elif storm is None:
        storm_text = _retry_storm(storm)
    else:
        storm_text = (
            f"{_retry_storm(storm)} (live, closed minutes through {str(through)[11:16]} UTC)"
        )
    lines = [("retry storm", storm_text)]
    for label, key, text in (
        ("slots held past the deadline", "deadline_overrun", _deadline),
        ("slots held by tools", "slot_held_by_tool", _tools),
        ("per-target saturation", "target_saturation", _targets),
    ):
        value = diagnostics.get(key)
        lines.append((label, text(value) + (" (live)" if value else "")))
    return lines


def diagnostics_lines(run: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, text) of each diagnostic and of goodput, from a run object's extra keys."""
    diagnostics = run.get("diagnostics") or {}
    if diagnostics.get("live"):
        return [*_live_lines(diagnostics), ("goodput", _goodput(run))]
    if diagnostics.get("note"):
        note = str(diagnostics["note"])
        return [("diagnostics", note), ("goodput", _goodput(run))]
    return [
        ("retry storm", _retry_storm(diagnostics.get("retry_storm"))),
        ("slots held past the deadline", _deadline(diagnostics.get("deadline_overrun"))),
        ("slots held by tools", _tools(diagnostics.get("slot_held_by_tool"))),
        ("per-target saturation", _targets(diagnostics.get("target_saturation"))),
        ("goodput", _goodput(run)),
    ]


def diagnostics_panel(run: dict[str, Any]) -> dbc.Card:
    """A card listing :func:`diagnostics_lines`."""
    rows = []
    live = bool((run.get("diagnostics") or {}).get("live"))
    for label, text in diagnostics_lines(run):
        rows += [
            html.Dt(label, className="col-sm-3 fw-normal text-body-secondary"),
            html.Dd(text, className="col-sm-9"),
        ]
    return dbc.Card(
        [
            dbc.CardHeader(
                "Cap-selection pitfalls and goodput "
                + ("(live: over closed minutes)" if live else "(from the sealed version)")
            ),
            dbc.CardBody(html.Dl(rows, className="row mb-0 small")),
        ],
        id="run-diagnostics",
        className="mb-3",
    )
