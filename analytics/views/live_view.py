"""A run's figures as ``GET /v1/runs/{run_id}`` gives them: the sealed run object where
nothing changed since the newest snapshot, else the live one computed from the current
minute table (:mod:`analytics.views.current_table`), marked ``"live": true``.

Plain Python over a few thousand rows: this runs in the read API's process, which must
stay small (no Polars).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from tpmledger.analytics.kernels import value_sketch
from tpmledger.analytics.kernels.figure_rules import clean
from tpmledger.analytics.kernels.run_level import (
    peak_minute,
    ratio,
    shard_balance,
    sustained_tpm_total,
)
from tpmledger.analytics.views.current_table import SETTLED, CurrentTable, current_table
from tpmledger.analytics.views.live_diagnostics import live_diagnostics
from tpmledger.storage.codecs.time_text import minute_text, ns_to_rfc3339, utc_ms_or_none
from tpmledger.storage.readers.live_read import run_state
from tpmledger.storage.schema.minute_keys import WHOLE_RUN


def live_figures(table: CurrentTable) -> dict[str, Any]:
    """The run object of a live run: what minute rows determine exactly, the rest null."""
    state = table.state
    whole = table.shard_rows(WHOLE_RUN)
    calls = sum(r["calls_in_minute"] for r in whole)
    successes = sum(r["successes"] for r in whole)
    prompt = sum(r["prompt_tpm_in"] for r in whole)
    completion = sum(r["completion_tpm_out"] for r in whole)
    # Open minutes are still filling: never a peak, never part of the sustained rate.
    settled = [r for r in whole if r["state"] in SETTLED]
    inner = [r["tpm_total"] for r in whole[1:-1] if r["state"] in SETTLED]
    retries = sum(r["retries"] or 0 for r in whole)
    figures: dict[str, Any] = {
        "run_id": state.run_id,
        "attempts": calls,
        "shard_count": len(table.shard_ids),
        "first_event_utc": ns_to_rfc3339(state.first_event_ns),
        "last_event_utc": ns_to_rfc3339(state.last_event_ns),
        "active_minutes": sum(1 for r in whole if r["calls_in_minute"] > 0),
        "peak_minute": peak_minute(settled, "tpm_total", "minute_utc", minute_text),
        "peak_completion_minute": peak_minute(
            settled, "completion_tpm_out", "minute_utc", minute_text
        ),
        "sustained_tpm_total": sustained_tpm_total(inner),
        "attempt_success_rate": ratio(successes, calls),
        "retry_rate": ratio(retries, calls) if table.retries_measured else None,
        "shard_balance": shard_balance({s: table.shard_tokens(s) for s in table.shard_ids}),
        "declared_shard_count": state.declared_shard_count,
        "concurrency_cap": state.concurrency_cap,
        "sweep_id": state.sweep_id,
        "work_conserving": table.work_conserving,
        "tokens": {"prompt": prompt, "completion": completion, "total": prompt + completion},
        **_call_figures(table, calls),
        "open_minutes": [minute_text(r["minute_utc"]) for r in whole if r["state"] == "open"],
        "diagnostics": live_diagnostics(table),
        "events_sha256": None,
        "seal": None,
        "snapshot_version": None,
    }
    figures = clean(figures)
    return figures


def _call_figures(table: CurrentTable, attempts: int) -> dict[str, Any]:
    """Logical calls, call success rate and retry causes (exact), TTFT and latency
    (sketched percentiles, exact moments) merged from every minute's run facts
    (docs/metrics.md#live-approximations). Not measured (null) while the facts do not
    cover every attempt counted in the minute rows (minutes stored before the facts
    were kept, or sealed before the live table caught up)."""
    facts = table.run_facts
    covered = sum(f["attempts"] for f in facts) == attempts and attempts > 0
    if not covered:
        return {
            "logical_calls": None,
            "call_success_rate": None,
            "retry_causes": None,
            "ttft_s": value_sketch.figures(None, variance=True),
            "latency_s": value_sketch.figures(None, variance=False),
        }
    calls = sum(f["logical_calls"] for f in facts)
    ok_calls = sum(f["call_successes"] for f in facts)
    causes: dict[str, int] | None = None
    if any(f["explicit_calls"] for f in facts) and table.retries_measured:
        causes = {}
        for f in facts:
            for cause, count in f["retry_causes"].items():
                causes[cause] = causes.get(cause, 0) + count
        causes = dict(sorted(causes.items()))
    return {
        "logical_calls": calls,
        "call_success_rate": ratio(ok_calls, calls),
        "retry_causes": causes,
        "ttft_s": value_sketch.figures(
            value_sketch.merged(f["ttft"] for f in facts), variance=True
        ),
        "latency_s": value_sketch.figures(
            value_sketch.merged(f["latency"] for f in facts), variance=False
        ),
    }


def run_view(
    session: Session, run_id: str, *, close_after_s: float = 120.0
) -> dict[str, Any] | None:
    """``GET /v1/runs/{run_id}``: sealed figures, or live ones with ``live: true``."""
    state = run_state(session, run_id)
    if state is None:
        return None
    if not state.has_new_data and state.snapshot_metrics is not None:
        data_as_of = state.snapshot_data_as_of
        return {
            **state.snapshot_metrics,
            "live": state.is_live,  # a provisional snapshot covering every span so far
            "data_as_of": utc_ms_or_none(data_as_of),
            "snapshot_final": state.snapshot_final,
        }
    table = current_table(session, run_id, close_after_s=close_after_s)
    assert table is not None
    figures = live_figures(table)
    if not table.minutes:  # spans stored, their first live update still to come
        figures["attempts"] = None
    return {
        **figures,
        "live": True,
        "data_as_of": utc_ms_or_none(table.data_as_of),
        # Spans stored since the live figures were computed (the runs list counts them
        # already); the next live update takes them in (docs/metrics.md#live-figures).
        "live_pending": table.data_as_of is None or table.data_as_of < state.updated_at,
        "attempts_stored": state.attempts,
        "latest_sealed_version": state.snapshot_version,
    }
