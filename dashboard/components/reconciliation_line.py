"""One line on the run page: the run's tokens counted by its spans and by its GenAI
token-usage metrics (docs/metrics.md#reconciliation)."""

from __future__ import annotations

from typing import Any

from dash import html

from tpmledger.dashboard.display import fmt_int


def reconciliation_text(figures: dict[str, Any]) -> str:
    """The reconciliation in words; "not measured" for a side that was not."""
    spans, metrics, gap = (figures.get(k) for k in ("tokens_by_spans", "tokens_by_metrics", "gap"))
    if metrics is None:
        return (
            f"Tokens by spans {fmt_int(spans)} · by GenAI token-usage metrics: not measured "
            "(no metrics received for this run)"
        )
    text = f"Tokens by spans {fmt_int(spans)} · by GenAI token-usage metrics {fmt_int(metrics)}"
    if gap is None:
        return text + " · gap not measured"
    if gap > 0:
        return text + f" · gap {fmt_int(gap)}: tokens in spans that never arrived"
    return text + f" · gap {fmt_int(gap)}"


def reconciliation_line(figures: dict[str, Any]) -> html.Div:
    return html.Div(
        reconciliation_text(figures), id="run-reconciliation", className="small text-body-secondary"
    )
