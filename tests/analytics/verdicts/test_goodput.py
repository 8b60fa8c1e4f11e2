"""Goodput under an SLO, sealed with the version; SLO parsing."""

from __future__ import annotations

from typing import Any

import pytest

from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, MINUTE_NS, attempt_row
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.analytics.views.run_extras import run_extras
from tpmledger.slo import Slo, SloError, parse_slo
from tpmledger.storage.server.database import in_one_snapshot
from tpmledger.storage.writers.sealed_figures_store import read_goodput

SECOND_NS = 1_000_000_000
SLO = parse_slo("ttft=0.5,latency=10")


def slo_rows(run_id: str, minutes: int = 5, *, ttft: bool = True) -> list[tuple[Any, ...]]:
    """Per minute 10 attempts of 150 tokens: 6 good, 2 with TTFT 1 s, 1 of 12 s, 1 failed."""
    kinds = ["good"] * 6 + ["slow_ttft"] * 2 + ["slow"] + ["failed"]
    rows = []
    for m in range(minutes):
        for i, kind in enumerate(kinds):
            end = BASE_NS + m * MINUTE_NS + (20 + i) * SECOND_NS
            held = 12 if kind == "slow" else 2
            rows.append(
                attempt_row(
                    run_id=run_id,
                    start_ns=end - held * SECOND_NS,
                    end_ns=end,
                    ttft_s=(1.0 if kind == "slow_ttft" else 0.2) if ttft else None,
                    status="error" if kind == "failed" else "ok",
                    error_type="http_500" if kind == "failed" else None,
                )
            )
    return rows


def test_goodput_counts_only_attempts_meeting_every_limit(database_url: str) -> None:
    store(database_url, slo_rows("slo-run"))
    result = seal_run(database_url, "slo-run", slo=SLO)
    figures = in_one_snapshot(
        database_url, read_goodput, "slo-run", result.version, "latency=10,ttft=0.5"
    )
    assert figures is not None
    assert figures["goodput_tpm_total"] == 900.0  # 6 good × 150 tokens, every inner minute
    assert figures["good_call_share"] == 0.6
    assert [m["goodput_tpm_total"] for m in figures["minutes"]] == [900] * 5
    assert [m["calls"] for m in figures["minutes"]] == [10] * 5
    extras = in_one_snapshot(database_url, run_extras, "slo-run", result.version, SLO.text)
    assert (extras["goodput_tpm_total"], extras["good_call_share"]) == (900.0, 0.6)
    # A latency-only SLO lets the slow-TTFT attempts count: 8 good.
    latency_only = parse_slo("latency=10")
    seal_run(database_url, "slo-run", slo=latency_only)
    extras = in_one_snapshot(database_url, run_extras, "slo-run", result.version, latency_only.text)
    assert extras["good_call_share"] == 0.8


def test_goodput_is_null_without_an_slo_or_without_ttft(database_url: str) -> None:
    store(database_url, slo_rows("no-ttft", ttft=False))
    result = seal_run(database_url, "no-ttft", slo=SLO)
    extras = in_one_snapshot(database_url, run_extras, "no-ttft", result.version, SLO.text)
    assert extras["goodput_tpm_total"] is None and extras["good_call_share"] is None
    assert "no attempt of the run reports TTFT" in extras["goodput"]["not_measured_because"]
    none = in_one_snapshot(database_url, run_extras, "no-ttft", result.version, None)
    assert (none["goodput_tpm_total"], none["good_call_share"], none["goodput"]) == (
        None,
        None,
        None,
    )
    # An SLO never computed for this version says how to compute it.
    other = in_one_snapshot(database_url, run_extras, "no-ttft", result.version, "latency=3")
    assert "tpmledger analyze no-ttft --slo latency=3" in other["goodput"]["not_measured_because"]


def test_slo_text_is_canonical_and_bad_text_is_refused() -> None:
    assert parse_slo(" ttft=0.50 , latency=10.0") == Slo(ttft_s=0.5, latency_s=10.0)
    assert parse_slo("ttft=0.50,latency=10.0").text == "latency=10,ttft=0.5"
    for bad, message in [
        ("ttft", "cannot read SLO part"),
        ("tpot=1", "cannot read SLO part"),
        ("ttft=-1", "positive number"),
        ("ttft=nan", "positive number"),
        ("ttft=1,ttft=2", "given twice"),
        ("ttft=fast", "not a number"),
        (" , ", "at least one limit"),
    ]:
        with pytest.raises(SloError, match=message):
            parse_slo(bad)
