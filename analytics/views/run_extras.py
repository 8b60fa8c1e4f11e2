"""The run object's sealed extras: ``diagnostics`` and goodput, read from storage.

Light on purpose (no Polars): the read API runs in the ingest process. A run never
sealed, or a version sealed before diagnostics existed, gets ``None`` figures with a
``diagnostics_note`` saying why and how to get them (``tpmledger analyze RUN``).
"""

from __future__ import annotations

import shlex
from typing import Any

from sqlalchemy.orm import Session

from tpmledger.analytics.kernels.diagnostic_params import diagnostics_params
from tpmledger.storage.writers.genai_metric_store import metric_tokens
from tpmledger.storage.writers.sealed_figures_store import read_diagnostics, read_goodput

DIAGNOSTIC_KEYS = (
    "retry_storm",
    "deadline_overrun",
    "slot_held_by_tool",
    "target_saturation",
    "work_conserving",
)


def _no_goodput(slo_text: str | None, why: str | None) -> dict[str, Any]:
    return {
        "goodput_tpm_total": None,
        "good_call_share": None,
        "goodput": {"slo": slo_text, "not_measured_because": why} if slo_text else None,
    }


def goodput_keys(
    session: Session, run_id: str, version: int | None, slo_text: str | None
) -> dict[str, Any]:
    """``goodput_tpm_total``, ``good_call_share`` and ``goodput`` (the SLO and why not
    measured) of a version under ``slo_text``; all ``None`` when no SLO is declared."""
    if slo_text is None:
        return _no_goodput(None, None)
    if version is None:
        return _no_goodput(slo_text, "not sealed yet")
    figures = read_goodput(session, run_id, version, slo_text)
    if figures is None:
        return _no_goodput(
            slo_text,
            f"not computed for this SLO at version {version}; "
            f"run `tpmledger analyze {shlex.quote(run_id)} --slo {slo_text}`",
        )
    return {
        "goodput_tpm_total": figures.get("goodput_tpm_total"),
        "good_call_share": figures.get("good_call_share"),
        "goodput": {
            "slo": slo_text,
            "good_calls": figures.get("good_calls"),
            "calls": figures.get("calls"),
            "not_measured_because": figures.get("not_measured_because"),
        },
    }


def run_extras(
    session: Session, run_id: str, version: int | None, slo_text: str | None = None
) -> dict[str, Any]:
    """``diagnostics`` (each ``None`` when not measured) and the goodput keys of a version."""
    note = None
    diagnostics: dict[str, Any] = dict.fromkeys(DIAGNOSTIC_KEYS)
    if version is None:
        note = "diagnostics are computed when the run is sealed"
    else:
        row = read_diagnostics(session, run_id, version)
        if row is None:
            note = (
                f"version {version} was sealed before diagnostics were computed; "
                f"run `tpmledger analyze {shlex.quote(run_id)}`"
            )
        else:
            diagnostics = {key: row.diagnostics.get(key) for key in DIAGNOSTIC_KEYS}
            diagnostics["params"] = row.params
    if note is not None:
        diagnostics["note"] = note
    return {"diagnostics": diagnostics, **goodput_keys(session, run_id, version, slo_text)}


#: Diagnostics a live run states over its closed minutes (analytics/views/live_diagnostics.py).
LIVE_DIAGNOSTICS = DIAGNOSTIC_KEYS


def live_run_diagnostics(live: dict[str, Any], version: int | None) -> dict[str, Any]:
    """A live run's ``diagnostics``: every one over its closed minutes (``live``, marked
    ``"live": true``), with the parameters they were computed with."""
    out = {key: live.get(key) for key in LIVE_DIAGNOSTICS}
    out["live"] = True
    out["through_minute_utc"] = live.get("through_minute_utc")
    out["params"] = diagnostics_params()
    out["sealed_version"] = version
    return out


def reconciliation(session: Session, run_id: str, tokens: dict[str, Any] | None) -> dict[str, Any]:
    """``{tokens_by_spans, tokens_by_metrics, gap}`` (docs/metrics.md#reconciliation): the
    run's tokens counted by its spans and by its GenAI token-usage metrics; ``gap`` =
    metrics − spans (tokens the metrics saw in spans that never arrived). ``None`` where
    a side was not measured: no metrics received, or no tokens figure yet."""
    by_spans = (tokens or {}).get("total")
    by_metrics = metric_tokens(session, run_id)
    if by_metrics is not None and by_metrics == int(by_metrics):
        by_metrics = int(by_metrics)
    gap = None if by_spans is None or by_metrics is None else by_metrics - by_spans
    return {"tokens_by_spans": by_spans, "tokens_by_metrics": by_metrics, "gap": gap}
