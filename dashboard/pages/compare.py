"""Compare page (``/compare?a=…&b=…``): two runs side by side with the verdict.

KPI differences with their intervals, the two runs' TPM and retry / stall rates on one
time-aligned chart, and the verdict in words with the rule that produced it and the
parameters (docs/dashboard.md#pages). Everything comes from each run's newest sealed
version (:mod:`analytics.verdicts.compare_runs`), never from spans.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import dash
import dash_bootstrap_components as dbc
from dash import Input, Output, dcc, html

from tpmledger.analytics.verdicts.compare_runs import (
    CompareParams,
    NotComparable,
    compare,
    load_run_minutes,
)
from tpmledger.dashboard.components.bottleneck_panel import verdict_words
from tpmledger.dashboard.config import DashboardConfig
from tpmledger.dashboard.data.sealed_runs import list_sealed_run_ids
from tpmledger.dashboard.display import NOT_MEASURED, fmt_int, fmt_rate, fmt_seconds
from tpmledger.dashboard.figures.chart_style import Figure, message_figure
from tpmledger.dashboard.figures.compare import compare_figure
from tpmledger.slo import SloError, optional_slo
from tpmledger.storage.readers.runs_read import UnknownRun
from tpmledger.storage.server.database import read_view

VERDICT_COLORS = {
    "improved": "success",
    "moved_the_bottleneck": "warning",
    "regressed": "danger",
    "inconclusive": "secondary",
}
_LABELS = {
    "sustained_tpm_total": ("Sustained TPM (total)", "tokens"),
    "sustained_completion_tpm": ("Sustained TPM (completion)", "tokens"),
    "retry_rate": ("Retry rate", "rate"),
    "stall_rate": ("Stall rate (timeouts, cancels)", "rate"),
    "call_success_rate": ("Call success rate", "rate"),
    "ttft_p95_s": ("TTFT p95", "seconds"),
    "goodput_tpm_total": ("Goodput TPM (total)", "tokens"),
    "good_call_share": ("Good call share", "rate"),
}


def _fmt(value: float | None, kind: str, signed: bool = False) -> str:
    if value is None:
        return NOT_MEASURED
    if kind == "tokens":
        text = fmt_int(value)
    elif kind == "rate":
        text = f"{value * 100:.2f} %" if signed else fmt_rate(value, 2)
        if signed:
            text = text.replace(" %", " pt")
    else:
        text = fmt_seconds(value)
    return f"+{text}" if signed and value >= 0 else text


def figures_table(result: dict[str, Any]) -> dbc.Table:
    """One row per figure: A, B, B − A and its 95 % interval."""
    rows = []
    for name, entry in result["figures"].items():
        label, kind = _LABELS[name]
        interval = entry["interval"]
        shown = (
            f"[{_fmt(interval[0], kind, True)}, {_fmt(interval[1], kind, True)}]"
            if interval
            else NOT_MEASURED
        )
        rows.append(
            html.Tr(
                [
                    html.Td(label),
                    html.Td(_fmt(entry["a"], kind)),
                    html.Td(_fmt(entry["b"], kind)),
                    html.Td(_fmt(entry["difference"], kind, True)),
                    html.Td(shown),
                ],
                id=f"compare-row-{name}",
            )
        )
    header = html.Thead(
        html.Tr([html.Th(h) for h in ("Figure", "A", "B", "B − A", "95 % interval")])
    )
    return dbc.Table([header, html.Tbody(rows)], size="sm", hover=True, id="compare-figures")


def params_text(result: dict[str, Any]) -> str:
    """The bootstrap parameters and thresholds, printed with every result."""
    p = result["params"]
    return (
        f"Bootstrap over minutes strictly between each run's first and last: {p['resamples']} "
        f"resamples, seed {p['seed']}, {p['confidence'] * 100:.0f} % percentile interval of "
        f"B − A; at least {p['min_minutes']} such minutes per run. A figure rises (falls) "
        f"beyond its interval when the whole interval is above (below) 0. SLO: "
        f"{p['slo'] or 'none'}."
    )


def own_bottlenecks(result: dict[str, Any]) -> html.Div:
    """Each run's own bottleneck verdict (what bounds it alone), beside the comparison."""
    parts: list[Any] = ["Each run's own bottleneck: "]
    for side in ("a", "b"):
        own = result["bottlenecks"][side]
        words = verdict_words(own) if own["verdict"] else NOT_MEASURED
        if side == "b":
            parts.append(" · ")
        parts += [html.Strong(f"{side.upper()} ({result[side]}): "), words]
        if own["verdict"]:
            parts.append(f" ({own['verdict']})")
    return html.Div(parts, id="compare-bottlenecks", className="mb-1")


def compare_panels(
    config: DashboardConfig, run_a: str | None, run_b: str | None, slo_text: str | None
) -> tuple[Any, Any, Figure]:
    """Server-side work of the page callback: verdict block, figures table, chart."""
    if not run_a or not run_b:
        return html.Div("Pick two runs."), None, message_figure("")
    try:
        slo = optional_slo(slo_text)
    except SloError as exc:
        return (
            dbc.Alert(f"SLO: {exc}", color="danger", id="compare-error"),
            None,
            message_figure(""),
        )
    try:
        with read_view(config.database_url) as session:
            slo_text, close = slo.text if slo else None, config.close_after_s
            a = load_run_minutes(session, run_a, slo_text, close_after_s=close)
            b = load_run_minutes(session, run_b, slo_text, close_after_s=close)
    except (UnknownRun, NotComparable) as exc:
        return dbc.Alert(str(exc), color="warning", id="compare-error"), None, message_figure("")
    result = compare(a, b, CompareParams(), slo.text if slo else None)
    verdict = html.Div(
        [
            html.Div(
                [
                    "Verdict: ",
                    dbc.Badge(
                        result["verdict"],
                        color=VERDICT_COLORS[result["verdict"]],
                        id="compare-verdict",
                        className="fs-6",
                    ),
                ],
                className="fs-5 fw-semibold mb-1",
            ),
            html.Div(f"Rule: {result['rule']}", id="compare-rule", className="mb-1"),
            own_bottlenecks(result),
            html.Div(params_text(result), id="compare-params", className="small mb-2"),
        ]
    )
    return verdict, figures_table(result), compare_figure(a, b)


def layout(
    config: DashboardConfig,
    a: str | None = None,
    b: str | None = None,
    slo: str | None = None,
    **_query: Any,
) -> html.Div:
    """Two run pickers (runs with a sealed version, read fresh on every visit) and an SLO."""
    with read_view(config.database_url) as session:
        run_ids = list_sealed_run_ids(session)
    title = html.H2("Compare two runs", className="h4 mb-3")
    if len(run_ids) < 2:
        return html.Div(
            [title, html.P("Compare needs two runs with a sealed version.", id="compare-empty")]
        )
    first = a if a in run_ids else run_ids[0]
    second = b if b in run_ids else next(r for r in run_ids if r != first)
    return html.Div(
        [
            title,
            dbc.Row(
                [
                    dbc.Col(
                        [
                            html.Label("A (baseline)"),
                            dcc.Dropdown(
                                id="compare-a", options=run_ids, value=first, clearable=False
                            ),
                        ]
                    ),
                    dbc.Col(
                        [
                            html.Label("B (candidate)"),
                            dcc.Dropdown(
                                id="compare-b", options=run_ids, value=second, clearable=False
                            ),
                        ]
                    ),
                    dbc.Col(
                        [
                            html.Label("SLO for goodput (optional)"),
                            dbc.Input(
                                id="compare-slo",
                                value=slo or "",
                                placeholder="ttft=0.5,latency=10",
                                debounce=True,
                            ),
                        ]
                    ),
                ],
                className="mb-3",
            ),
            html.Div(id="compare-summary"),
            dbc.Card(
                dbc.CardBody(dcc.Graph(id="compare-graph", config={"displaylogo": False})),
                className="mb-3",
            ),
            html.Div(id="compare-table"),
        ]
    )


def register(app: dash.Dash, config: DashboardConfig) -> None:
    """Register ``/compare`` and the callback that compares the picked runs."""
    dash.register_page(
        __name__,
        path="/compare",
        name="Compare",
        title="Compare runs · tpmledger",
        order=3,
        layout=partial(layout, config),
    )

    @app.callback(
        Output("compare-summary", "children"),
        Output("compare-table", "children"),
        Output("compare-graph", "figure"),
        Input("compare-a", "value"),
        Input("compare-b", "value"),
        Input("compare-slo", "value"),
    )
    def draw_compare(
        run_a: str | None, run_b: str | None, slo: str | None
    ) -> tuple[Any, Any, Figure]:
        return compare_panels(config, run_a, run_b, slo)
