"""Tool-held slots and target saturation live (docs/metrics.md#diagnostics), against the seal.

Runs are stored in batches through the real write paths (attempts and tool spans as
ingest stores them) while the live updater drains them; the live run object's
``diagnostics`` must equal what sealing the same stored data gives: tool spans arriving
before and after their attempts (into minutes whose state the updater keeps, and into
minutes a checkpoint already sealed), and a target cap declared late (larger, by a later
attempt).
"""

from __future__ import annotations

import json
import os
import random
from typing import Any

import pytest

from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, MINUTE_NS, attempt_row
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.analytics.views.live_view import run_view
from tpmledger.storage.schema.attempt_columns import ATTEMPT_COPY_COLUMNS
from tpmledger.storage.server.database import in_one_snapshot, raw_transaction
from tpmledger.storage.writers.sealed_figures_store import read_diagnostics
from tpmledger.storage.writers.tool_span_store import write_tool_spans

pytestmark = pytest.mark.slow
SECOND = 1_000_000_000


def _live(url: str, run_id: str) -> dict[str, Any]:
    live = in_one_snapshot(url, run_view, run_id)
    assert live is not None and live["live"] is True
    diagnostics: dict[str, Any] = live["diagnostics"]
    assert diagnostics["live"] is True and diagnostics["through_minute_utc"] is not None
    return diagnostics


def _sealed(url: str, run_id: str) -> dict[str, Any]:
    version = seal_run(url, run_id).version
    row = in_one_snapshot(url, read_diagnostics, run_id, version)
    assert row is not None
    diagnostics: dict[str, Any] = row.diagnostics
    return diagnostics


def _store_tools(url: str, tools: list[tuple[Any, ...]]) -> None:
    with raw_transaction(url) as conn:
        write_tool_spans(conn, tools)


def _agent_run(rng: random.Random, run_id: str, traces: int) -> tuple[list[Any], list[Any]]:
    """Attempts over ~4 minutes, a few per trace; tool spans in the same traces, inside,
    across and outside the slots (overlapping each other), and some in traces of no
    attempt. Returns (attempt rows, tool rows)."""
    attempts, tools = [], []
    for _ in range(traces):
        trace = os.urandom(16)
        at = BASE_NS + int(rng.uniform(0, 230) * SECOND)
        for _ in range(rng.randint(1, 3)):
            end = at + int(rng.uniform(0.5, 20) * SECOND)
            attempts.append(attempt_row(run_id=run_id, trace_id=trace, start_ns=at, end_ns=end))
            for _ in range(rng.choice((0, 1, 2, 3))):
                lo = at + int(rng.uniform(-5, 22) * SECOND)
                hi = lo + int(rng.uniform(0.1, 8) * SECOND)
                tools.append((trace, os.urandom(8), None, run_id, "0", lo, hi, "search", "ok"))
            at = end + int(rng.uniform(0, 5) * SECOND)
    for _ in range(traces // 5):  # another trace's tool overlaps slots in time only
        lo = BASE_NS + int(rng.uniform(0, 230) * SECOND)
        tools.append(
            (os.urandom(16), os.urandom(8), None, run_id, "0", lo, lo + 3 * SECOND, "x", "ok")
        )
    return attempts, tools


def _assert_held_equal(live: dict[str, Any], sealed: dict[str, Any]) -> None:
    have, want = live["slot_held_by_tool"], sealed["slot_held_by_tool"]
    assert want is not None and want["attempts_holding_for_tools"] > 10, want
    assert have is not None
    for key in ("tool_spans", "attempts_holding_for_tools"):
        assert have[key] == want[key], (key, have, want)
    for key in ("share", "tool_slot_seconds", "slot_seconds"):
        assert have[key] == pytest.approx(want[key], rel=1e-12), (key, have, want)


def test_tool_held_slots_live_equal_the_sealed_ones_whatever_arrives_first(
    database_url: str,
) -> None:
    rng = random.Random(24)
    attempts, tools = _agent_run(rng, "agent-live", 300)
    rng.shuffle(tools)
    early_tools, late_tools = tools[: len(tools) // 3], tools[len(tools) // 3 :]
    updater = LiveUpdater(database_url)
    _store_tools(database_url, early_tools)  # before their attempts
    updater.update_once()
    for low in range(0, len(attempts), 150):
        store(database_url, attempts[low : low + 150])
        updater.update_once()
    for low in range(0, len(late_tools), 100):  # after their attempts (states kept)
        _store_tools(database_url, late_tools[low : low + 100])
        updater.update_once()
    live = _live(database_url, "agent-live")
    _assert_held_equal(live, _sealed(database_url, "agent-live"))


def test_tool_spans_after_a_checkpoint_change_the_live_share(database_url: str) -> None:
    """Tool spans of attempts a checkpoint already sealed, arriving with newer attempts:
    the live figure follows them (minutes read whole by a cold updater)."""
    rng = random.Random(5)
    attempts, tools = _agent_run(rng, "agent-cp", 200)
    attempts.sort(key=lambda row: row[ATTEMPT_COPY_COLUMNS.index("end_ns")])
    store(database_url, attempts[: len(attempts) // 2])
    _store_tools(database_url, tools[: len(tools) // 2])
    LiveUpdater(database_url).update_once()
    checkpoint = _sealed(database_url, "agent-cp")["slot_held_by_tool"]
    _store_tools(database_url, tools[len(tools) // 2 :])
    store(database_url, attempts[len(attempts) // 2 :])
    LiveUpdater(database_url).update_once()
    live = _live(database_url, "agent-cp")
    assert live["slot_held_by_tool"]["tool_spans"] == len(tools) != checkpoint["tool_spans"]
    _assert_held_equal(live, _sealed(database_url, "agent-cp"))


def _target_rows(rng: random.Random, run_id: str) -> list[tuple[Any, ...]]:
    """Attempts to two capped targets and one without a cap over ~5 minutes, bursts and
    gaps, some attempts crossing minutes, some shorter than a second; the first target's
    cap 3 declared on some attempts, a larger one (5) only by attempts stored last."""
    rows = []
    for i in range(900):
        target = rng.choice((("openai", "gpt-a"), ("anthropic", "claude-b"), (None, "free")))
        burst = rng.choice((0, 40, 95, 200, 270))
        start = BASE_NS + int((burst + rng.uniform(0, 30)) * SECOND)
        end = start + int(rng.choice((0.3, rng.uniform(1, 40))) * SECOND)
        resource: dict[str, Any] = {"service.name": run_id}
        if target == ("openai", "gpt-a") and i % 7 == 0:
            resource["tpmledger.target.concurrency.cap"] = 3
        if target == ("anthropic", "claude-b") and i % 11 == 0:
            resource["tpmledger.target.concurrency.cap"] = "4"
        rows.append(
            attempt_row(
                run_id=run_id,
                provider=target[0],
                model=target[1],
                start_ns=start,
                end_ns=end,
                resource_attributes=json.dumps(resource),
            )
        )
    late_cap = json.dumps({"tpmledger.target.concurrency.cap": 5})
    start = BASE_NS + 2 * MINUTE_NS + 10 * SECOND
    rows += [
        attempt_row(
            run_id=run_id,
            provider="openai",
            model="gpt-a",
            start_ns=start,
            end_ns=start + 4 * SECOND,
            resource_attributes=late_cap,
        )
        for _ in range(3)
    ]
    return rows


def _assert_saturation_equal(live: dict[str, Any], sealed: dict[str, Any]) -> None:
    have, want = live["target_saturation"], sealed["target_saturation"]
    assert want is not None and len(want) == 2, want
    assert have is not None and len(have) == len(want)
    for mine, theirs in zip(have, want, strict=True):
        assert mine.keys() == theirs.keys()
        for key, value in theirs.items():
            if isinstance(value, float):
                assert mine[key] == pytest.approx(value, rel=1e-12), (key, mine, theirs)
            else:
                assert mine[key] == value, (key, mine, theirs)


def test_target_saturation_live_equals_the_sealed_one_with_a_cap_declared_late(
    database_url: str,
) -> None:
    rows = _target_rows(random.Random(11), "targets-live")
    updater = LiveUpdater(database_url)
    body, late = rows[:-3], rows[-3:]
    random.Random(3).shuffle(body)
    for low in range(0, len(body), 200):
        store(database_url, body[low : low + 200])
        updater.update_once()
    before = _live(database_url, "targets-live")["target_saturation"]
    assert {(t["model"], t["cap"]) for t in before} == {("gpt-a", 3), ("claude-b", 4)}
    store(database_url, late)
    updater.update_once()
    live = _live(database_url, "targets-live")
    assert {(t["model"], t["cap"]) for t in live["target_saturation"]} == {
        ("gpt-a", 5),
        ("claude-b", 4),
    }
    sealed = _sealed(database_url, "targets-live")
    _assert_saturation_equal(live, sealed)
    assert any(t["share_at_cap"] for t in sealed["target_saturation"])


def test_target_saturation_after_a_checkpoint(database_url: str) -> None:
    rows = _target_rows(random.Random(12), "targets-cp")
    store(database_url, rows[:400])
    LiveUpdater(database_url).update_once()
    seal_run(database_url, "targets-cp")
    store(database_url, rows[400:])
    LiveUpdater(database_url).update_once()
    live = _live(database_url, "targets-cp")
    _assert_saturation_equal(live, _sealed(database_url, "targets-cp"))
