"""KPI cards of the run page; every token figure names its type (docs/metrics.md,
docs/dashboard.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import dash_bootstrap_components as dbc
from dash import html

from tpmledger.dashboard.data.run_records import RunRecord
from tpmledger.dashboard.display import NOT_MEASURED, fmt_int, fmt_rate, fmt_seconds, fmt_utc

# Shown for a live run's figure the data so far cannot state yet.
NOT_YET = "not measured yet"
# A live run's peak and sustained figures while no minute has closed yet.
IN_PROGRESS = "first minutes in progress"


def approximate_note(values: Mapping[str, Any]) -> str | None:
    """ "≈ within ±1 %" for sketched live percentiles (docs/metrics.md#live-approximations)."""
    alpha = values.get("relative_accuracy")
    if not values.get("approximate") or alpha is None:
        return None
    return f"live estimate, within ±{alpha * 100:g} %"


def kpi_card(card_id: str, label: str, value: str, detail: str | None = None) -> dbc.Col:
    """One figure: a label naming what it counts, the value, and an optional detail line."""
    muted = " text-body-secondary" if value in (NOT_MEASURED, NOT_YET, IN_PROGRESS) else ""
    body = [
        html.Div(label, className="kpi-label small text-body-secondary"),
        html.Div(value, id=f"{card_id}-value", className=f"kpi-value fs-4 fw-semibold{muted}"),
    ]
    if detail:
        body.append(html.Div(detail, id=f"{card_id}-detail", className="small text-body-secondary"))
    return dbc.Col(
        dbc.Card(dbc.CardBody(body), className="h-100 kpi-card", id=card_id),
        xs=12,
        sm=6,
        lg=3,
        xxl=True,
        className="mb-3",
    )


def _peak_detail(peak: Mapping[str, Any] | None) -> str | None:
    if not peak:
        return None
    return (
        f"{fmt_utc(peak.get('minute_utc'))} · prompt {fmt_int(peak.get('prompt_tpm_in'))} + "
        f"completion {fmt_int(peak.get('completion_tpm_out'))} · "
        f"{peak.get('shard_count', '?')} shards"
    )


def _sustained_detail(metrics: Mapping[str, Any]) -> str:
    text = f"{metrics.get('active_minutes', '?')} active minutes"
    open_minutes = metrics.get("open_minutes") or []
    if open_minutes:
        text += f" · {len(open_minutes)} in progress, not counted"
    return text


def _retry_detail(metrics: Mapping[str, Any]) -> str | None:
    causes: Mapping[str, int] = metrics.get("retry_causes") or {}
    if not causes:
        return None
    top = sorted(causes.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    return "causes: " + ", ".join(f"{name} {count:,}" for name, count in top)


TOKEN_PART_LABELS = {"cache_read": "cache read", "cache_write": "cache write",
                     "reasoning": "reasoning"}  # fmt: skip


def token_tooltip_text(
    tokens: Mapping[str, Any] | None, parts: Mapping[str, int | None] | None
) -> str:
    """The run's tokens by type for the peak-TPM card's tooltip: prompt and completion, and
    the cache and reasoning tokens within them ("not measured" where no attempt reported
    them; docs/metrics.md#token-parts)."""
    tokens = tokens or {}
    text = (
        f"Run tokens: prompt {fmt_int(tokens.get('prompt'))} · "
        f"completion {fmt_int(tokens.get('completion'))}"
    )
    if parts is not None:
        inside = ", ".join(
            f"{label} {fmt_int(parts.get(key))}" for key, label in TOKEN_PART_LABELS.items()
        )
        text += f" · of which {inside}"
    return text


def run_kpi_cards(run: RunRecord, token_parts: Mapping[str, int | None] | None = None) -> dbc.Row:
    """Peak TPM (total and completion), sustained, success, retry, TTFT p95, shards; the
    peak-TPM card's tooltip gives the run's tokens by type, ``token_parts`` (cache and
    reasoning tokens) included.

    For a live run every figure is live: peak and sustained TPM over its closed minutes
    (open minutes are still filling), call success exact over the data so far, TTFT
    percentiles sketched within the stated accuracy (said on the card).
    """
    m = run.metrics
    live = run.is_live

    def later(text: str) -> str:
        return NOT_YET if live and text == NOT_MEASURED else text

    def settled(text: str) -> str:
        return IN_PROGRESS if live and text == NOT_MEASURED and m.get("attempts") else text

    peak = m.get("peak_minute") or {}
    peak_completion = m.get("peak_completion_minute") or {}
    ttft = m.get("ttft_s") or {}
    declared = m.get("declared_shard_count", run.declared_shard_count)
    shards = m.get("shard_count", run.observed_shards)
    ttft_detail = None
    if ttft.get("p95") is not None:
        ttft_detail = f"p50 {fmt_seconds(ttft.get('p50'))} · p99 {fmt_seconds(ttft.get('p99'))}"
        note = approximate_note(ttft)
        if note:
            ttft_detail += f" · {note}"
    success_detail = f"attempts: {fmt_rate(m.get('attempt_success_rate'))}"
    if m.get("logical_calls") is not None:
        success_detail += f" · {m['logical_calls']:,} calls"
    cards = [
        kpi_card(
            "run-kpi-peak-total",
            "Peak TPM (total: prompt + completion)",
            settled(fmt_int(peak.get("tpm_total"))),
            _peak_detail(peak),
        ),
        kpi_card(
            "run-kpi-peak-completion",
            "Peak completion TPM (output tokens)",
            settled(fmt_int(peak_completion.get("completion_tpm_out"))),
            fmt_utc(peak_completion.get("minute_utc")) if peak_completion else None,
        ),
        kpi_card(
            "run-kpi-sustained",
            "Sustained TPM (total, median of inner minutes)",
            settled(fmt_int(m.get("sustained_tpm_total"))),
            _sustained_detail(m),
        ),
        kpi_card(
            "run-kpi-success",
            "Call success rate",
            later(fmt_rate(m.get("call_success_rate"))),
            success_detail,
        ),
        kpi_card("run-kpi-retry", "Retry rate", fmt_rate(m.get("retry_rate")), _retry_detail(m)),
        kpi_card("run-kpi-ttft", "TTFT p95", later(fmt_seconds(ttft.get("p95"))), ttft_detail),
        kpi_card(
            "run-kpi-shards",
            "Shards (observed)",
            str(shards),
            f"{declared} declared" if declared is not None else "none declared",
        ),
    ]
    tooltip = dbc.Tooltip(
        token_tooltip_text(m.get("tokens"), token_parts),
        target="run-kpi-peak-total",
        id="run-kpi-tokens-tooltip",
        placement="bottom",
    )
    return dbc.Row([*cards, tooltip], className="g-3")
