"""The live minute table equals the batch minute table, whatever order attempts arrive in.

Attempts are stored through the real bulk write path in random batches (late ones,
re-sent duplicates, rollup parents and children split across batches, retries without
resend counts), the live updater drains the marks after some of the batches, and
sometimes the run is sealed midway. At the end the current table (live rows over the
snapshot's) must equal the table a seal computes from scratch, row for row, and the live
run figures must equal the batch figures they claim to state exactly.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.analytics.kernels.minute_table import MINUTE_COLUMNS, with_minute_utc
from tpmledger.analytics.kernels.value_sketch import RELATIVE_ACCURACY
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.analytics.seal.run_computation import compute_run
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.analytics.views.current_table import current_table
from tpmledger.analytics.views.live_view import live_figures
from tpmledger.storage.readers import attempt_flags
from tpmledger.storage.server.database import in_one_snapshot
from tpmledger.storage.writers.sealed_figures_store import read_diagnostics

SECOND = 1_000_000_000
# Columns compared (the minute table's; state and extras are the live view's own).
COMPARED = tuple(c for c in MINUTE_COLUMNS if c not in ("shard_id", "minute_utc"))
EXACT_FIGURES = (
    "attempts",
    "shard_count",
    "active_minutes",
    "peak_minute",
    "peak_completion_minute",
    "sustained_tpm_total",
    "attempt_success_rate",
    "retry_rate",
    "shard_balance",
    "tokens",
    "work_conserving",
    "logical_calls",
    "call_success_rate",
    "retry_causes",
)

attempt_specs = st.fixed_dictionaries(
    {
        "shard": st.sampled_from(["0", "1", "10"]),
        "call": st.one_of(st.none(), st.integers(0, 4)),
        "resend": st.one_of(st.none(), st.integers(0, 2)),
        "start_ms": st.integers(0, 4 * 60_000),
        "duration_ms": st.integers(1, 150_000),
        "wait_ms": st.one_of(st.none(), st.integers(0, 40_000)),
        "ttft_ms": st.one_of(st.none(), st.integers(1, 5_000)),
        "ok": st.booleans(),
        "prompt": st.integers(0, 500),
        "completion": st.one_of(st.none(), st.integers(0, 500)),
        "parent": st.one_of(st.none(), st.integers(0, 40)),
        "cap": st.sampled_from([None, 2, 4]),
        # Deadline overrun: a deadline of its own, and / or a request timeout (resource).
        "deadline_s": st.one_of(st.none(), st.sampled_from([0.5, 20, 100, "soon"])),
        "timeout_s": st.sampled_from([None, None, 30, 90]),
    }
)


def _rows(run_id: str, specs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    rows: list[tuple[Any, ...]] = []
    ids: list[tuple[bytes, bytes]] = []
    for spec in specs:
        trace_id, span_id, parent = os.urandom(16), os.urandom(8), None
        if spec["parent"] is not None and spec["parent"] < len(ids):
            trace_id, parent = ids[spec["parent"]]  # a child of an earlier attempt
        ids.append((trace_id, span_id))
        start = BASE_NS + spec["start_ms"] * 1_000_000 + 123
        explicit = spec["call"] is not None
        rows.append(
            attempt_row(
                trace_id=trace_id,
                span_id=span_id,
                parent_span_id=parent,
                run_id=run_id,
                shard_id=spec["shard"],
                concurrency_cap=spec["cap"],
                call_id=f"call-{spec['call']}" if explicit else span_id.hex(),
                call_id_explicit=explicit,
                resend_count=spec["resend"],
                start_ns=start,
                end_ns=start + spec["duration_ms"] * 1_000_000,
                queue_wait_s=None if spec["wait_ms"] is None else spec["wait_ms"] / 1000,
                ttft_s=None if spec["ttft_ms"] is None else spec["ttft_ms"] / 1000,
                status="ok" if spec["ok"] else "error",
                error_type=None if spec["ok"] else "timeout",
                http_status=200 if spec["ok"] else 504,
                prompt_tokens=spec["prompt"],
                completion_tokens=spec["completion"],
                **_declared(spec),
            )
        )
    return rows


def _declared(spec: dict[str, Any]) -> dict[str, str]:
    span = {"gen_ai.operation.name": "chat"}
    if spec.get("deadline_s") is not None:
        span["tpmledger.deadline_s"] = str(spec["deadline_s"])
    resource = {"service.name": "test"}
    if spec.get("timeout_s") is not None:
        resource["tpmledger.request.timeout_s"] = str(spec["timeout_s"])
    return {"span_attributes": json.dumps(span), "resource_attributes": json.dumps(resource)}


def _batch_rows(url: str, run_id: str) -> dict[tuple[str, datetime], dict[str, Any]]:
    table = with_minute_utc(compute_run(url, run_id).analysis.minutes)
    return {(r["shard_id"], r["minute_utc"]): r for r in table.to_dicts()}


def _assert_same(url: str, run_id: str, updater: LiveUpdater) -> None:
    for _ in range(3):  # a cap declared late queues earlier minutes once more
        if not updater.update_once():
            break
    expected = _batch_rows(url, run_id)
    table = in_one_snapshot(url, current_table, run_id)
    assert table is not None
    got = {(r["shard_id"], r["minute_utc"].astimezone(UTC)): r for r in table.rows}
    # The batch table keeps a shard's rows only where it was busy; the live table makes
    # every minute of every shard: its other rows are the implicit empty ones.
    assert set(expected) <= set(got)
    for key in set(got) - set(expected):
        row = got[key]
        assert key[0] != "*" and row["calls_in_minute"] == 0 and row["in_flight_max"] == 0, row
        assert not row["queue_depth_max"], row
    for key, want in expected.items():
        have = got[key]
        for column in COMPARED:
            assert have[column] == want[column], (key, column, have[column], want[column])
    batch = compute_run(url, run_id).metrics
    figures = live_figures(table)
    for name in EXACT_FIGURES:
        assert figures[name] == batch[name], (name, figures[name], batch[name])
    assert_sketched_within_accuracy(figures, batch)
    # The deadline overrun, live from per-minute sums, equals the seal's.
    live_overrun = figures["diagnostics"]["deadline_overrun"]
    version = seal_run(url, run_id).version
    sealed = in_one_snapshot(url, read_diagnostics, run_id, version)
    want = sealed.diagnostics["deadline_overrun"] if sealed else None
    if want is None:
        assert live_overrun is None
    else:
        assert live_overrun is not None, want
        for key in ("share", "attempts_with_deadline", "attempts_over_deadline"):
            assert live_overrun[key] == want[key], (key, live_overrun, want)
        assert live_overrun["slot_seconds_wasted"] == pytest.approx(
            want["slot_seconds_wasted"], rel=1e-9, abs=1e-9
        )


def assert_sketched_within_accuracy(live: dict[str, Any], sealed: dict[str, Any]) -> None:
    """Live percentiles within the stated relative accuracy of the sealed (exact) ones;
    mean and variance exact (sums: equal up to the order of float additions)."""
    for name in ("ttft_s", "latency_s"):
        have, want = live[name], sealed[name]
        assert have["approximate"] is True
        if want["p50"] is None:
            assert have["p50"] is None
            continue
        alpha = have["relative_accuracy"]
        assert alpha == RELATIVE_ACCURACY <= 0.01
        for p in ("p50", "p95", "p99"):
            assert abs(have[p] - want[p]) <= alpha * abs(want[p]) + 1e-12, (name, p, have, want)
        for moment in ("mean", "variance") if name == "ttft_s" else ("mean",):
            assert have[moment] == pytest.approx(want[moment], rel=1e-9, abs=1e-12), (name, moment)


@settings(
    max_examples=40,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    specs=st.lists(attempt_specs, min_size=1, max_size=30),
    order=st.randoms(use_true_random=False),
    batches=st.integers(1, 5),
    seal_after=st.one_of(st.none(), st.integers(0, 4)),
    resend_share=st.floats(0, 0.5),
)
@pytest.mark.slow
def test_live_table_equals_batch_table_for_any_arrival_order(
    database_url: str,
    specs: list[dict[str, Any]],
    order: Any,
    batches: int,
    seal_after: int | None,
    resend_share: float,
) -> None:
    run_id = f"live-{os.urandom(4).hex()}"
    rows = _rows(run_id, specs)
    # Probes by id (the usual case) or by a range of end times (a cold read of a busy
    # minute): both must give the same flags.
    attempt_flags.RANGE_PROBE_MIN = 1 if order.random() < 0.5 else 20_000
    arrival = list(rows)
    order.shuffle(arrival)
    # Re-sent exports: some rows come again in a later batch.
    arrival += [r for r in rows if order.random() < resend_share]
    size = max(1, len(arrival) // batches)
    updater = LiveUpdater(database_url)
    for index, start in enumerate(range(0, len(arrival), size)):
        store(database_url, arrival[start : start + size])
        if order.random() < 0.7:
            updater.update_once()
        if seal_after == index:
            updater.update_once()
            seal_run(database_url, run_id)
    # The updater that saw the batches (its flag cache warm), or a fresh one (cold).
    _assert_same(
        database_url, run_id, updater if order.random() < 0.7 else LiveUpdater(database_url)
    )
    attempt_flags.RANGE_PROBE_MIN = 20_000  # (both modes are exact; this restores the default)


def _call(minute: int, second: int = 0) -> tuple[Any, ...]:
    start = BASE_NS + (minute * 60 + second) * SECOND
    return attempt_row(run_id="r", start_ns=start, end_ns=start + 2 * SECOND)


def test_only_touched_minutes_are_recomputed(database_url: str) -> None:
    store(database_url, [_call(m) for m in range(30)])
    updater = LiveUpdater(database_url)
    first = updater.update_once()
    assert [u.minutes for u in first] == [30]
    store(database_url, [_call(40)])
    (second,) = updater.update_once()
    assert second.minutes == 1
    assert second.attempts_read == 1
    assert updater.update_once() == []  # nothing new: nothing recomputed


def test_late_attempt_updates_a_closed_minute_and_state_is_reported(database_url: str) -> None:
    store(database_url, [_call(m) for m in range(3)])
    LiveUpdater(database_url).update_once()
    store(database_url, [_call(0, 5)])
    LiveUpdater(database_url).update_once()
    table = in_one_snapshot(
        database_url,
        current_table,
        "r",
        now=datetime.fromtimestamp(BASE_NS // SECOND, UTC) + timedelta(minutes=3),
    )
    assert table is not None and table.live
    whole = table.shard_rows("*")
    assert [r["calls_in_minute"] for r in whole] == [2, 1, 1]
    assert [r["state"] for r in whole] == ["closed", "open", "open"]
    assert pl.Series([r["tpm_total"] for r in whole]).sum() == 4 * 150


def test_an_update_aborted_by_a_concurrent_transaction_is_retried_at_once(
    database_url: str, monkeypatch: Any
) -> None:
    """Round-2 reproduction: during a checkpoint the live update failed with
    SerializationFailure and live figures paused 30 s."""
    import psycopg

    from tpmledger.storage.server.database import libpq_url
    from tpmledger.storage.writers import live_store

    store(database_url, [_call(0), _call(0, 10)])
    updater = LiveUpdater(database_url)
    assert updater.update_once()
    store(database_url, [_call(0, 20)])
    original = live_store.replace_minutes
    collided = []

    def replace_after_a_concurrent_delete(conn: Any, run_id: str, *args: Any) -> None:
        if not collided:  # as a seal does: drop the minute's live rows and commit
            with psycopg.connect(libpq_url(database_url), autocommit=True) as other:
                other.execute("DELETE FROM live_minutes WHERE run_id = %s", (run_id,))
            collided.append(run_id)
        original(conn, run_id, *args)

    monkeypatch.setattr(
        "tpmledger.analytics.live.run_update.replace_minutes", replace_after_a_concurrent_delete
    )
    [update] = updater.update_once()
    assert collided and not updater.failures  # retried at once, not paused for 30 s
    assert update.minutes >= 1
    _assert_same(database_url, "r", updater)
