"""Diagnostics sealed with a version, on runs built with known pitfalls (real PostgreSQL)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.analytics.pitfall_runs import (
    deadline_rows,
    minute,
    seed_tool_run,
    storm_rows,
    target_rows,
)
from tests.analytics.seeding import store
from tests.storage.builders import attempt_row
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.analytics.views.run_extras import run_extras
from tpmledger.storage.server.database import in_one_snapshot


def sealed_diagnostics(url: str, run_id: str) -> dict[str, Any]:
    result = seal_run(url, run_id)
    diagnostics: dict[str, Any] = in_one_snapshot(url, run_extras, run_id, result.version)[
        "diagnostics"
    ]
    return diagnostics


def test_a_retry_storm_is_flagged_in_the_minutes_it_happened(database_url: str) -> None:
    store(database_url, storm_rows("storm", {2, 3}))
    storm = sealed_diagnostics(database_url, "storm")["retry_storm"]
    assert storm == {"flag": True, "budget": 0.2, "minutes": [minute(2), minute(3)]}


def test_no_storm_under_the_budget_and_none_when_retries_are_not_measured(
    database_url: str,
) -> None:
    store(database_url, storm_rows("calm", set()))
    assert sealed_diagnostics(database_url, "calm")["retry_storm"] == {
        "flag": False,
        "budget": 0.2,
        "minutes": [],
    }
    # No resend count and no call id anywhere: retries are not measured, nor is a storm.
    store(database_url, [attempt_row(run_id="blind") for _ in range(5)])
    diagnostics = sealed_diagnostics(database_url, "blind")
    assert diagnostics["retry_storm"] is None
    assert diagnostics["deadline_overrun"] is None
    assert diagnostics["slot_held_by_tool"] is None
    assert diagnostics["target_saturation"] is None


@pytest.mark.slow
@pytest.mark.parametrize("on", ["span", "resource"])
def test_deadline_overruns_at_a_known_share(database_url: str, on: str) -> None:
    # 10 attempts with a 5 s deadline; 3 held their slot 8 s: share 0.3, 9 s wasted.
    held = [8.0, 8.0, 8.0] + [2.0] * 7
    store(database_url, deadline_rows("late", held_s=held, deadline_s=5.0, on=on))
    overrun = sealed_diagnostics(database_url, "late")["deadline_overrun"]
    assert overrun == {
        "share": 0.3,
        "slot_seconds_wasted": 9.0,
        "attempts_with_deadline": 10,
        "attempts_over_deadline": 3,
    }


def test_tool_spans_inside_slots_are_a_share_of_slot_seconds(database_url: str) -> None:
    seed_tool_run(database_url, "agent")
    held = sealed_diagnostics(database_url, "agent")["slot_held_by_tool"]
    assert held == {
        "share": 0.3,
        "tool_slot_seconds": 6.0,
        "slot_seconds": 20.0,
        "tool_spans": 4,
        "attempts_holding_for_tools": 1,
    }


@pytest.mark.slow
def test_target_saturation_against_a_declared_target_cap(database_url: str) -> None:
    store(database_url, target_rows("targets", cap=2, overlapping=3))
    (target,) = sealed_diagnostics(database_url, "targets")["target_saturation"]
    assert target["provider"] == "openai" and target["model"] == "gpt-capped"
    assert target["cap"] == 2
    assert target["in_flight_max"] == 3
    assert target["seconds"] == 10
    assert target["share_over_cap"] == 1.0


def test_a_version_sealed_before_diagnostics_says_how_to_get_them(database_url: str) -> None:
    store(database_url, [attempt_row(run_id="old")])
    result = seal_run(database_url, "old")
    from tpmledger.storage.server.database import raw_transaction

    with raw_transaction(database_url) as conn:
        conn.execute("DELETE FROM snapshot_diagnostics WHERE run_id = 'old'")
    extras = in_one_snapshot(database_url, run_extras, "old", result.version)
    assert extras["diagnostics"]["retry_storm"] is None
    assert "tpmledger analyze old" in extras["diagnostics"]["note"]
    # analyze (the unchanged newest version) adds them.
    again = seal_run(database_url, "old")
    assert again.version == result.version and not again.created
    assert (
        "note"
        not in in_one_snapshot(database_url, run_extras, "old", result.version)["diagnostics"]
    )
