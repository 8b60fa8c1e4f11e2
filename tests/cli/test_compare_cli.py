"""``tpmledger compare`` and ``analyze --slo`` against a real PostgreSQL."""

from __future__ import annotations

import json

import pytest

from tests.analytics.compare_builders import seed_profile
from tests.analytics.pitfall_runs import minute, storm_rows
from tests.analytics.seeding import store
from tpmledger.cli.main import main


@pytest.fixture
def url(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", database_url)
    monkeypatch.delenv("TPMLEDGER_SLO", raising=False)
    return database_url


def test_compare_prints_the_verdict_rule_and_parameters(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_profile(url, "base", calls=20, tokens=100, retried=2)
    seed_profile(url, "cand", calls=20, tokens=103, retried=8)
    assert main(["compare", "base", "cand"]) == 0
    out = capsys.readouterr().out
    assert "verdict: moved_the_bottleneck" in out
    assert "rule: throughput rose +3.0 % but retry rate rose" in out
    assert "params: resamples 2000, seed 0, confidence 0.95, min_minutes 3, slo none" in out
    assert "sustained_tpm_total" in out and "95 % interval" in out

    assert main(["compare", "base", "cand", "--json", "--resamples", "500", "--seed", "3"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result) >= {"a", "b", "verdict", "figures", "params"}
    assert (result["a"], result["b"], result["verdict"]) == ("base", "cand", "moved_the_bottleneck")
    assert set(result["figures"]["retry_rate"]) == {"a", "b", "difference", "interval"}
    assert (result["params"]["resamples"], result["params"]["seed"]) == (500, 3)


def test_compare_with_an_slo_analyzes_runs_that_lack_its_goodput(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    seed_profile(url, "base", calls=20, tokens=100, retried=2)
    seed_profile(url, "cand", calls=30, tokens=100, retried=3, ttft_s=0.9)
    assert main(["compare", "base", "cand", "--json", "--slo", "ttft=0.5"]) == 0
    captured = capsys.readouterr()
    assert "analyzing base for goodput under ttft=0.5" in captured.err
    result = json.loads(captured.out)
    assert result["figures"]["goodput_tpm_total"]["b"] == 0.0
    assert result["verdict"] == "inconclusive" and "goodput fell" in result["rule"]


def test_compare_refuses_bad_input_clearly(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    seed_profile(url, "base", calls=20, tokens=100, retried=2)
    assert main(["compare", "base", "missing"]) == 2
    assert "no such run: 'missing'" in capsys.readouterr().err
    assert main(["compare", "base", "base", "--slo", "ttft=soon"]) == 2
    assert "not a number of seconds" in capsys.readouterr().err


def test_analyze_prints_diagnostics_and_goodput(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store(url, storm_rows("stormy", {1}))
    assert main(["analyze", "stormy", "--json", "--slo", "latency=10"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["diagnostics"]["retry_storm"] == {
        "flag": True,
        "budget": 0.2,
        "minutes": [minute(1)],
    }
    assert run["diagnostics"]["deadline_overrun"] is None
    assert run["good_call_share"] == 1.0 and run["goodput"]["slo"] == "latency=10"
    assert main(["analyze", "stormy", "--json"]) == 0
    run = json.loads(capsys.readouterr().out)
    assert run["goodput_tpm_total"] is None and run["good_call_share"] is None
