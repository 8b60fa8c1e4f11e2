"""Two short spans years apart must not ask for millions of minute rows anywhere."""

from __future__ import annotations

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import tpmledger.read_api as read_api
from tests.analytics.seeding import store
from tests.storage.builders import attempt_row
from tpmledger.analytics.kernels.run_span_limit import RunTooLong, check_run_minutes
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.analytics.worker import ResealLoop
from tpmledger.dashboard.data.run_records import load_runs
from tpmledger.storage.server.database import in_one_snapshot

SECOND = 1_000_000_000
Y2000 = 946_684_800 * SECOND + SECOND
Y2026 = 1_769_917_470 * SECOND


def _sparse(url: str) -> None:
    store(
        url,
        [
            attempt_row(run_id="sparse", start_ns=Y2000, end_ns=Y2000 + 2 * SECOND),
            attempt_row(run_id="sparse", start_ns=Y2026, end_ns=Y2026 + 2 * SECOND),
        ],
    )


def test_the_limit_counts_minutes_first_to_last() -> None:
    check_run_minutes("r", 0, 31 * 1440 - 1)  # 31 days exactly: allowed
    with pytest.raises(RunTooLong, match="TPMLEDGER_MAX_RUN_DAYS"):
        check_run_minutes("r", 0, 31 * 1440)


@pytest.mark.slow
def test_a_run_26_years_long_is_refused_by_name_everywhere(database_url: str) -> None:
    # Before: the seal filled 13.7 M minutes (MemoryError under 2 GiB); the live view
    # built a dict per minute in the ingest process answering GET /v1/runs/{id}.
    _sparse(database_url)
    with pytest.raises(RunTooLong, match="'sparse' covers 13,720,545 minutes"):
        seal_run(database_url, "sparse")
    assert ResealLoop(database_url, quiet_s=0).poll_once() == []  # logged, not raised
    LiveUpdater(database_url).update_once()
    app = FastAPI()
    app.include_router(read_api.build_router(database_url))
    client = TestClient(app)
    for path in ("/v1/runs/sparse", "/v1/runs/sparse/minutes"):
        answer = client.get(path)
        assert answer.status_code == 422, answer.text
        assert "TPMLEDGER_MAX_RUN_DAYS" in answer.json()["detail"]
    assert client.get("/v1/runs").status_code == 200
    [run] = in_one_snapshot(database_url, load_runs)
    assert run.run_id == "sparse" and run.metrics == {}
