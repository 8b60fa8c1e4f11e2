"""Figures sealed beside a version that need attempts: diagnostics, minute outcomes, goodput.

They are computed from the same chunks as the seal's figures
(:class:`analytics.sealed_figures_stream.SealedFiguresStream`, fed by
:func:`analytics.run_computation.compute_in_view`) and before the sealing transaction;
:func:`store_sealed_figures` writes them in that transaction with the version number.
Pages and API requests read the stored rows (:func:`run_extras`) and never scan spans.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from tpmledger.storage.writers.sealed_figures_store import store_diagnostics, store_goodput


@dataclass(frozen=True)
class SealedFigures:
    """What is stored beside one sealed version."""

    diagnostics: dict[str, Any]
    minute_outcomes: dict[str, Any]
    params: dict[str, Any]
    goodput: dict[str, dict[str, Any]] = field(default_factory=dict)  # SLO text -> figures


def store_sealed_figures(
    session: Session, run_id: str, version: int, figures: SealedFigures
) -> None:
    """Write ``figures`` for ``run_id`` at ``version`` in the caller's transaction."""
    store_diagnostics(
        session, run_id, version, figures.diagnostics, figures.minute_outcomes, figures.params
    )
    for slo_text, goodput in figures.goodput.items():
        store_goodput(session, run_id, version, slo_text, goodput)
