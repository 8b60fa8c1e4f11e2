"""Every run figure live (docs/metrics.md#live-approximations), checked against the seal.

A run of a few thousand attempts over several minutes, with explicit calls retried after
failures of several types, is stored in batches through the real write path while the
live updater drains them; its live run object (``GET /v1/runs/{id}``'s view) is read,
then the same run is sealed and its sealed object read: logical calls, call success and
retry causes must be equal, TTFT and latency percentiles within the stated relative
accuracy, means and the TTFT variance equal up to float summation order.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from tests.analytics.live.test_live_minutes import assert_sketched_within_accuracy
from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.analytics.views.live_view import run_view
from tpmledger.storage.server.database import in_one_snapshot
from tpmledger.storage.writers.sealed_figures_store import read_diagnostics

pytestmark = pytest.mark.slow
SECOND = 1_000_000_000
RUN_ID = "live-figures"
CAUSES = ("rate_limit", "timeout", "500")


def _calls(rng: random.Random, count: int) -> list[tuple[Any, ...]]:
    """``count`` logical calls over ~8 minutes; a quarter fail once or twice (a cause each)
    and are retried, some end failed; TTFT and latency log-normal (heavy right tails)."""
    rows = []
    for call in range(count):
        start = BASE_NS + int(rng.uniform(0, 480) * SECOND)
        tries = 1 if rng.random() < 0.75 else rng.choice((2, 3))
        for attempt in range(tries):
            last = attempt == tries - 1
            ok = last and rng.random() < 0.9
            latency = rng.lognormvariate(0.3, 0.6)
            cause = None if ok else rng.choice(CAUSES)
            rows.append(
                attempt_row(
                    run_id=RUN_ID,
                    shard_id=str(call % 3),
                    call_id=f"call-{call}",
                    call_id_explicit=True,
                    resend_count=attempt if rng.random() < 0.5 else None,
                    start_ns=start,
                    end_ns=start + int(latency * SECOND),
                    ttft_s=rng.lognormvariate(-1.5, 0.5) if ok else None,
                    status="ok" if ok else "error",
                    error_type=cause,
                    http_status=200 if ok else 500,
                    prompt_tokens=rng.randint(50, 500),
                    completion_tokens=rng.randint(10, 300) if ok else 0,
                    **_declared(rng, call),
                )
            )
            start += int((latency + rng.uniform(0.1, 40)) * SECOND)
    return rows


def _declared(rng: random.Random, call: int) -> dict[str, str]:
    """Shard 0 declares a 2 s request timeout on its resource; a tenth of attempts set a
    deadline of their own; the rest fall back to the run's largest timeout."""
    span: dict[str, Any] = {"gen_ai.operation.name": "chat"}
    if rng.random() < 0.1:
        span["tpmledger.deadline_s"] = rng.choice((1.0, 3.0))
    resource: dict[str, Any] = {"service.name": "test"}
    if call % 3 == 0:
        resource["tpmledger.request.timeout_s"] = 2.0
    return {"span_attributes": json.dumps(span), "resource_attributes": json.dumps(resource)}


def _assert_deadline_overrun_equal(url: str, live: dict[str, Any], version: int) -> None:
    have = live["diagnostics"]["deadline_overrun"]
    sealed = in_one_snapshot(url, read_diagnostics, RUN_ID, version)
    assert sealed is not None
    want = sealed.diagnostics["deadline_overrun"]
    assert want is not None and have is not None and have["attempts_over_deadline"] > 0
    for key in ("share", "attempts_with_deadline", "attempts_over_deadline"):
        assert have[key] == want[key], (key, have, want)
    assert have["slot_seconds_wasted"] == pytest.approx(want["slot_seconds_wasted"], rel=1e-9)


def test_live_figures_equal_the_sealed_ones_or_lie_within_the_stated_accuracy(
    database_url: str,
) -> None:
    rng = random.Random(24)
    rows = _calls(rng, 2500)
    rng.shuffle(rows)  # attempts of a call arrive in any order, across batches
    updater = LiveUpdater(database_url)
    for start in range(0, len(rows), 700):
        store(database_url, rows[start : start + 700])
        updater.update_once()
    live = in_one_snapshot(database_url, run_view, RUN_ID)
    assert live is not None and live["live"] is True
    assert sum(live["retry_causes"].values()) > 100  # the run really retries

    version = seal_run(database_url, RUN_ID).version
    sealed = in_one_snapshot(database_url, run_view, RUN_ID)
    assert sealed is not None and sealed["seal"] is not None
    assert "approximate" not in (sealed["ttft_s"] or {})  # a sealed version's are exact
    for name in ("attempts", "logical_calls", "call_success_rate", "retry_causes"):
        assert live[name] == sealed[name], (name, live[name], sealed[name])
    assert_sketched_within_accuracy(live, sealed)
    _assert_deadline_overrun_equal(database_url, live, version)


def test_live_figures_survive_a_checkpoint_and_late_retries(database_url: str) -> None:
    """Minutes sealed by a checkpoint keep their facts: a retry arriving after the seal
    moves its call's last attempt, and the live figures still equal a fresh seal's."""
    rng = random.Random(7)
    rows = _calls(rng, 600)
    early, late = rows[: len(rows) // 2], rows[len(rows) // 2 :]
    updater = LiveUpdater(database_url)
    store(database_url, early)
    updater.update_once()
    seal_run(database_url, RUN_ID)
    # The second half, some of it retries of calls the first half began.
    store(database_url, late)
    LiveUpdater(database_url).update_once()  # a cold updater: flags probed anew
    live = in_one_snapshot(database_url, run_view, RUN_ID)
    assert live is not None and live["live"] is True
    version = seal_run(database_url, RUN_ID).version
    sealed = in_one_snapshot(database_url, run_view, RUN_ID)
    assert sealed is not None
    for name in ("attempts", "logical_calls", "call_success_rate", "retry_causes"):
        assert live[name] == sealed[name], (name, live[name], sealed[name])
    assert_sketched_within_accuracy(live, sealed)
    _assert_deadline_overrun_equal(database_url, live, version)
