"""The peak-TPM card's tooltip names the run's tokens by type, cache and reasoning tokens
included (docs/metrics.md#token-parts)."""

from __future__ import annotations

from typing import Any

import dash_bootstrap_components as dbc

from tpmledger.dashboard.components.kpi_cards import run_kpi_cards, token_tooltip_text
from tpmledger.dashboard.data.run_records import RunRecord


def _run(metrics: dict[str, Any]) -> RunRecord:
    return RunRecord(
        run_id="r",
        status="sealed",
        observed_shards=1,
        declared_shard_count=None,
        concurrency_cap=None,
        sweep_id=None,
        attempts=3,
        first_event_utc=None,
        last_event_utc=None,
        snapshot=None,
        metrics=metrics,
    )


def test_tooltip_text_names_every_token_type() -> None:
    text = token_tooltip_text(
        {"prompt": 2000, "completion": 1000, "total": 3000},
        {"cache_read": 1500, "cache_write": None, "reasoning": 40},
    )
    assert text == (
        "Run tokens: prompt 2,000 · completion 1,000 · of which cache read 1,500, "
        "cache write not measured, reasoning 40"
    )


def test_the_cards_carry_the_tooltip_on_the_peak_card() -> None:
    row = run_kpi_cards(
        _run({"tokens": {"prompt": 5, "completion": 2, "total": 7}}),
        {"cache_read": 3, "cache_write": None, "reasoning": None},
    )
    tooltips = [child for child in row.children if isinstance(child, dbc.Tooltip)]
    assert len(tooltips) == 1
    assert tooltips[0].target == "run-kpi-peak-total"
    assert "cache read 3" in tooltips[0].children
    assert "reasoning not measured" in tooltips[0].children
