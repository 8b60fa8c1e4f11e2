"""Figures sealed beside a version that need attempts: diagnostics, minute outcomes, goodput.

:func:`compute_sealed_figures` runs once per seal, after the run's events are computed
and before the sealing transaction (it reads the run's declarations and tool spans once);
:func:`store_sealed_figures` writes them in that transaction with the version number.
Pages and API requests read the stored rows (:func:`run_extras`) and never scan spans.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl
from sqlalchemy.orm import Session

from analytics.event_plans import explicit_call_ids
from analytics.goodput import compute_goodput
from analytics.minute_outcomes import STALL_HTTP_TYPES, STALL_MARKERS, minute_outcomes
from analytics.run_computation import RunComputation
from analytics.run_diagnostics import (
    DEFAULT_RETRY_BUDGET,
    deadline_overrun,
    diagnostics_params,
    retry_storm,
    slot_held_by_tool,
    target_saturation,
)
from analytics.slo import Slo
from storage.database import raw_transaction
from storage.minute_keys import WHOLE_RUN
from storage.pitfall_attributes import fetch_declarations, fetch_target_attempts
from storage.sealed_figures_store import store_diagnostics, store_goodput
from storage.tool_span_store import fetch_run_tool_intervals


@dataclass(frozen=True)
class SealedFigures:
    """What is stored beside one sealed version."""

    diagnostics: dict[str, Any]
    minute_outcomes: dict[str, Any]
    params: dict[str, Any]
    goodput: dict[str, dict[str, Any]] = field(default_factory=dict)  # SLO text -> figures


def compute_sealed_figures(
    url: str, computation: RunComputation, slo: Slo | None = None
) -> SealedFigures:
    """Diagnostics, per-minute outcomes and (with ``slo``) goodput of ``computation``."""
    events = computation.events
    run_id = computation.run_id
    with raw_transaction(url) as conn:
        declared = fetch_declarations(conn, run_id)
        tools = fetch_run_tool_intervals(conn, run_id)
        models = sorted({m for _, m in declared.target_caps if m is not None})
        targets = fetch_target_attempts(conn, run_id, models) if models else []
    whole = computation.analysis.minutes.filter(pl.col("shard_id") == WHOLE_RUN).sort("minute_ns")
    diagnostics = {
        "retry_storm": retry_storm(whole, DEFAULT_RETRY_BUDGET),
        "deadline_overrun": deadline_overrun(events, declared),
        "slot_held_by_tool": slot_held_by_tool(events, tools),
        "target_saturation": target_saturation(events, declared.target_caps, targets),
        "work_conserving": computation.metrics.get("work_conserving"),
    }
    outcomes = minute_outcomes(events, explicit_call_ids=explicit_call_ids(events))
    params = {
        **diagnostics_params(DEFAULT_RETRY_BUDGET),
        "stall_error_markers": list(STALL_MARKERS),
        "stall_http_types": list(STALL_HTTP_TYPES),
    }
    goodput = {slo.text: compute_goodput(events, slo)} if slo is not None else {}
    return SealedFigures(diagnostics, outcomes, params, goodput)


def store_sealed_figures(
    session: Session, run_id: str, version: int, figures: SealedFigures
) -> None:
    """Write ``figures`` for ``run_id`` at ``version`` in the caller's transaction."""
    store_diagnostics(
        session, run_id, version, figures.diagnostics, figures.minute_outcomes, figures.params
    )
    for slo_text, goodput in figures.goodput.items():
        store_goodput(session, run_id, version, slo_text, goodput)
