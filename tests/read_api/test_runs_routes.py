"""GET /v1/runs/{run_id}, /minutes and /events.jsonl shapes (docs/metrics.md) on a real
PostgreSQL."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import tpmledger.read_api as read_api
from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.analytics.seal.sealing import seal_run

SECOND = 1_000_000_000
RUN_KEYS = {
    "run_id", "attempts", "logical_calls", "shard_count", "first_event_utc",
    "last_event_utc", "active_minutes", "peak_minute", "peak_completion_minute",
    "sustained_tpm_total", "attempt_success_rate", "call_success_rate", "retry_rate",
    "retry_causes", "ttft_s", "shard_balance", "events_sha256", "seal", "snapshot_version",
    "bottleneck",
}  # fmt: skip
EXTRA_KEYS = {
    "declared_shard_count", "concurrency_cap", "sweep_id", "work_conserving", "tokens",
    "latency_s", "live", "data_as_of", "diagnostics", "goodput_tpm_total", "good_call_share",
    "goodput", "reconciliation", "attempts_source", "retry_rate_not_measured_because",
}  # fmt: skip
MINUTE_KEYS = [
    "minute_utc", "state", "calls_in_minute", "prompt_tpm_in", "completion_tpm_out", "tpm_total",
    "successes", "failures", "retries", "retry_rate", "success_rate", "ttft_p50_s",
    "ttft_p95_s", "ttft_p99_s", "in_flight_mean", "in_flight_max", "queue_depth_mean",
    "queue_depth_max", "concurrency_cap", "shards_active", "tokens",
]  # fmt: skip
PEAK_KEYS = {
    "minute_utc", "shard_count", "calls_in_minute", "completion_tpm_out", "prompt_tpm_in",
    "tpm_total",
}  # fmt: skip
UTC_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


@pytest.fixture
def client(database_url: str) -> TestClient:
    rows = [
        attempt_row(
            run_id="api-run",
            shard_id=str(i % 2),
            start_ns=BASE_NS + i * 10 * SECOND,
            end_ns=BASE_NS + i * 10 * SECOND + 3 * SECOND,
            ttft_s=0.5,
        )
        for i in range(20)
    ]
    store(database_url, rows)
    LiveUpdater(database_url).update_once()
    app = FastAPI()
    app.include_router(read_api.build_router(database_url))
    return TestClient(app)


def test_unsealed_run_is_served_live_without_seal(client: TestClient) -> None:
    body = client.get("/v1/runs/api-run").json()
    live_keys = {"latest_sealed_version", "open_minutes", "live_pending", "attempts_stored"}
    assert set(body) == RUN_KEYS | EXTRA_KEYS | live_keys
    assert body["live"] is True and UTC_Z.match(body["data_as_of"])
    assert body["live_pending"] is False and body["attempts_stored"] == 20
    assert body["seal"] is None and body["snapshot_version"] is None
    assert body["attempts"] == 20
    # No attempt reported cache or reasoning tokens: not measured, never 0.
    assert body["tokens"] == {
        "prompt": 2000,
        "completion": 1000,
        "total": 3000,
        "cache_read": None,
        "cache_write": None,
        "reasoning": None,
    }
    # Every figure is live: calls exact, percentiles sketched and saying so.
    assert body["logical_calls"] == 20 and body["call_success_rate"] == 1.0
    ttft = body["ttft_s"]
    assert ttft["approximate"] is True and ttft["relative_accuracy"] == 0.01
    assert abs(ttft["p95"] - 0.5) <= 0.005 and ttft["mean"] == 0.5 and ttft["variance"] == 0.0
    assert body["diagnostics"]["live"] is True
    listed = client.get("/v1/runs").json()["runs"]
    assert [(r["run_id"], r["status"]) for r in listed] == [("api-run", "live")]


def test_a_run_stored_before_its_first_live_update_is_known_everywhere(
    database_url: str,
) -> None:
    """Spans stored, no live update yet (issue 37: the runs list counted 2,944 attempts
    while the run object said 0 and /minutes "no spans stored"): the run object says the
    figures are pending with the stored count, /minutes is an empty series."""
    store(database_url, [attempt_row(run_id="fresh-run", ttft_s=0.2) for _ in range(3)])
    app = FastAPI()
    app.include_router(read_api.build_router(database_url))
    client = TestClient(app)
    body = client.get("/v1/runs/fresh-run").json()
    assert body["live"] is True and body["live_pending"] is True
    assert body["attempts"] is None and body["attempts_stored"] == 3
    assert client.get("/v1/runs/fresh-run/minutes").json() == {"minutes": []}
    [listed] = [r for r in client.get("/v1/runs").json()["runs"] if r["run_id"] == "fresh-run"]
    assert listed["attempts"] == 3
    LiveUpdater(database_url).update_once()
    body = client.get("/v1/runs/fresh-run").json()
    assert body["live_pending"] is False and body["attempts"] == 3
    assert client.get("/v1/runs/nobody/minutes").status_code == 404


@pytest.mark.slow
def test_traffic_after_a_seal_is_live_at_once_over_the_sealed_minutes(
    client: TestClient, database_url: str
) -> None:
    seal_run(database_url, "api-run")
    assert client.get("/v1/runs/api-run").json()["live"] is False
    more = [
        attempt_row(
            run_id="api-run", start_ns=BASE_NS + 600 * SECOND, end_ns=BASE_NS + 601 * SECOND
        )
    ]
    store(database_url, more)
    LiveUpdater(database_url).update_once()
    body = client.get("/v1/runs/api-run").json()
    assert body["live"] is True and body["attempts"] == 21
    assert body["latest_sealed_version"] == 1
    minutes = client.get("/v1/runs/api-run/minutes").json()["minutes"]
    assert sum(m["calls_in_minute"] for m in minutes) == 21
    states = {m["state"] for m in minutes}
    assert "sealed" in states and states - {"sealed"} <= {"open", "closed"}
    assert minutes[-1]["state"] != "sealed" and minutes[-1]["calls_in_minute"] == 1


def test_sealed_run_detail_has_exact_names_and_utc_times(
    client: TestClient, database_url: str
) -> None:
    sealed = seal_run(database_url, "api-run")
    body = client.get("/v1/runs/api-run").json()
    assert set(body) == RUN_KEYS | EXTRA_KEYS | {"snapshot_final"}
    assert body["live"] is False
    assert body["seal"] == sealed.seal and body["snapshot_version"] == 1
    assert set(body["peak_minute"]) == PEAK_KEYS
    assert UTC_Z.match(body["first_event_utc"]) and UTC_Z.match(body["peak_minute"]["minute_utc"])
    assert set(body["ttft_s"]) == {"p50", "p95", "p99", "mean", "variance"}
    assert set(body["shard_balance"]) == {"shares", "imbalance"}
    assert body["retry_rate"] is None  # no resend_count, no explicit call ids: not measured


def test_minutes_whole_run_and_per_shard(client: TestClient, database_url: str) -> None:
    seal_run(database_url, "api-run")
    minutes = client.get("/v1/runs/api-run/minutes").json()["minutes"]
    assert [list(m) for m in minutes] == [MINUTE_KEYS] * len(minutes)
    assert sum(m["calls_in_minute"] for m in minutes) == 20
    assert all(UTC_Z.match(m["minute_utc"]) for m in minutes)
    assert {m["concurrency_cap"] for m in minutes} == {32}  # two shards declaring 16
    none = {"cache_read": None, "cache_write": None, "reasoning": None}
    assert all(m["tokens"] == none for m in minutes)
    shard = client.get("/v1/runs/api-run/minutes", params={"shard_id": "1"}).json()["minutes"]
    assert sum(m["calls_in_minute"] for m in shard) == 10
    assert all(m["shards_active"] in (0, 1) for m in shard)
    assert {m["concurrency_cap"] for m in shard} == {16}
    assert all(m["tokens"] is None for m in shard)  # kept for the whole run only


def test_cache_and_reasoning_tokens_per_minute_and_run_live_and_sealed(
    database_url: str,
) -> None:
    # Minute 0: two attempts report cache reads (30 + 0) and one reasoning (7); minute 1:
    # one attempt reports a cache write (5); rollups are left out (the parent of minute 1).
    parent = bytes.fromhex("00000000000000aa")
    trace = bytes(15) + b"\x01"
    rows = [
        attempt_row(run_id="cached", end_ns=BASE_NS + 10 * SECOND, cache_read_tokens=30,
                    reasoning_tokens=7),
        attempt_row(run_id="cached", end_ns=BASE_NS + 20 * SECOND, cache_read_tokens=0),
        attempt_row(run_id="cached", end_ns=BASE_NS + 70 * SECOND, cache_write_tokens=5,
                    trace_id=trace, parent_span_id=parent),
        attempt_row(run_id="cached", end_ns=BASE_NS + 71 * SECOND, cache_write_tokens=5,
                    trace_id=trace, span_id=parent, call_id=parent.hex()),
        attempt_row(run_id="cached", end_ns=BASE_NS + 130 * SECOND),
    ]  # fmt: skip
    store(database_url, rows)
    LiveUpdater(database_url).update_once()
    app = FastAPI()
    app.include_router(read_api.build_router(database_url))
    client = TestClient(app)
    run_tokens = {"cache_read": 30, "cache_write": 5, "reasoning": 7}
    minute_tokens = [
        {"cache_read": 30, "cache_write": None, "reasoning": 7},
        {"cache_read": None, "cache_write": 5, "reasoning": None},
        {"cache_read": None, "cache_write": None, "reasoning": None},
    ]
    for state in ("live", "sealed"):
        body = client.get("/v1/runs/cached").json()
        assert body["live"] is (state == "live")
        assert {k: body["tokens"][k] for k in run_tokens} == run_tokens, state
        minutes = client.get("/v1/runs/cached/minutes").json()["minutes"]
        assert [m["tokens"] for m in minutes] == minute_tokens, state
        # The run's figure is the sum of its minutes' (one formula, live and sealed).
        for key, total in run_tokens.items():
            assert sum(m["tokens"][key] or 0 for m in minutes) == total
        seal_run(database_url, "cached")


@pytest.mark.slow
def test_events_stream_hashes_to_events_sha256(client: TestClient, database_url: str) -> None:
    sealed = seal_run(database_url, "api-run")
    response = client.get("/v1/runs/api-run/events.jsonl")
    assert response.status_code == 200
    assert hashlib.sha256(response.content).hexdigest() == sealed.metrics["events_sha256"]
    assert response.content.count(b"\n") == 20


@pytest.mark.slow
def test_unknown_run_and_shard_are_404_with_message(client: TestClient) -> None:
    for path in ("/v1/runs/nope", "/v1/runs/nope/minutes", "/v1/runs/nope/events.jsonl"):
        response = client.get(path)
        assert response.status_code == 404
        assert "unknown run 'nope'" in response.json()["detail"]
    response = client.get("/v1/runs/api-run/minutes", params={"shard_id": "9"})
    assert response.status_code == 404 and "no shard '9'" in response.json()["detail"]


def test_a_nul_byte_in_a_run_id_is_404_not_500(client: TestClient) -> None:
    for path in ("", "/minutes", "/events.jsonl", "/summary", "/consistency?from=1&to=2"):
        response = client.get(f"/v1/runs/a%00b{path}")
        assert response.status_code == 404, (path, response.status_code)


@pytest.mark.slow
def test_whole_run_downloads_past_the_cap_get_503_with_retry_after(database_url: str) -> None:
    from tpmledger.read_api import runs_routes
    from tpmledger.read_api.heavy_requests import HeavyRequests

    store(database_url, [attempt_row(run_id="capped") for _ in range(3)])
    heavy = HeavyRequests(1, retry_after_s=3)
    app = FastAPI()
    app.include_router(runs_routes.build_router(database_url, heavy=heavy), prefix="/v1")
    client = TestClient(app)
    busy = heavy.take()  # another download in progress
    refused = client.get("/v1/runs/capped/events.jsonl")
    assert refused.status_code == 503
    assert refused.headers["Retry-After"] == "3"
    busy.release()
    served = client.get("/v1/runs/capped/events.jsonl")
    assert served.status_code == 200
    assert served.headers["X-Events-Count"] == "3"
    assert served.content.count(b"\n") == 3
    assert heavy.in_use == 0  # released once the file was sent
    assert client.get("/v1/runs/nope/events.jsonl").status_code == 404
    assert heavy.in_use == 0  # and when the run is unknown


MINUTE_NS = 60 * SECOND
DAY_NS = 1_440 * MINUTE_NS


def _far_apart_run(database_url: str, run_id: str) -> None:
    """3 shards, each one attempt now and one 2 days later: 2,881 minutes."""
    rows = [
        attempt_row(
            run_id=run_id,
            shard_id=str(shard),
            concurrency_cap=4,
            queue_wait_s=0.5 if shard else None,
            resend_count=0,
            start_ns=BASE_NS + day * 2 * DAY_NS + shard * SECOND,
            end_ns=BASE_NS + day * 2 * DAY_NS + shard * SECOND + 2 * SECOND,
            ttft_s=0.5,
        )
        for shard in range(3)
        for day in (0, 1)
    ]
    store(database_url, rows)


@pytest.mark.slow
def test_a_sparse_run_stores_rows_for_its_attempts_and_serves_every_minute(
    client: TestClient, database_url: str
) -> None:
    from sqlalchemy import text

    from tpmledger.storage.server.database import read_view

    _far_apart_run(database_url, "far")
    LiveUpdater(database_url).update_once()
    live = {
        shard: client.get("/v1/runs/far/minutes", params={"shard_id": shard}).json()["minutes"]
        for shard in ("*", "0", "1")
    }
    seal_run(database_url, "far")
    with read_view(database_url) as session:
        stored = session.execute(
            text(
                "SELECT count(*) FILTER (WHERE shard_id <> '*'), count(*) FILTER "
                "(WHERE shard_id = '*') FROM minute_metrics WHERE run_id = 'far'"
            )
        ).one()
    # A shard's rows: the minutes its 6 attempts ended, ran or waited in; the whole
    # run's: every minute (one leaf each).
    assert stored[0] <= 2 * 6 and stored[1] == 2 * 1_440 + 1
    for shard, before in live.items():
        sealed = client.get("/v1/runs/far/minutes", params={"shard_id": shard}).json()["minutes"]
        assert len(sealed) == len(before) == 2 * 1_440 + 1
        assert {m["state"] for m in sealed} == {"sealed"}
        strip = [{k: v for k, v in m.items() if k != "state"} for m in sealed]
        assert strip == [{k: v for k, v in m.items() if k != "state"} for m in before]
    quiet = client.get("/v1/runs/far/minutes", params={"shard_id": "1"}).json()["minutes"][100]
    assert quiet["calls_in_minute"] == 0 and quiet["retries"] == 0
    assert (quiet["queue_depth_mean"], quiet["queue_depth_max"]) == (0.0, 0)
    assert quiet["ttft_p50_s"] is None and quiet["retry_rate"] is None
    no_queue = client.get("/v1/runs/far/minutes", params={"shard_id": "0"}).json()["minutes"]
    assert no_queue[100]["queue_depth_mean"] is None


@pytest.mark.slow
def test_minutes_of_a_bounded_window(client: TestClient, database_url: str) -> None:
    _far_apart_run(database_url, "far")
    seal_run(database_url, "far")
    first = client.get("/v1/runs/far/minutes").json()["minutes"][0]["minute_utc"]
    start = first[:16] + "Z"  # 2026-…T…:MMZ
    params = {"shard_id": "2", "from": start, "limit": 10}
    window = client.get("/v1/runs/far/minutes", params=params).json()["minutes"]
    assert len(window) == 10 and window[0]["minute_utc"] == first
    assert window[0]["calls_in_minute"] == 1 and window[1]["calls_in_minute"] == 0
    tail = client.get("/v1/runs/far/minutes", params={"from": "2100-01-01T00:00Z"})
    assert tail.status_code == 200 and tail.json() == {"minutes": []}
    bounded = client.get(
        "/v1/runs/far/minutes", params={"from": start, "to": start.replace("Z", ":00+00:00")}
    ).json()["minutes"]
    assert [m["minute_utc"] for m in bounded] == [first]
    # Live (not sealed yet) the same window.
    _far_apart_run(database_url, "far-live")
    LiveUpdater(database_url).update_once()
    live = client.get("/v1/runs/far-live/minutes", params={"shard_id": "2", "limit": 3})
    assert [m["calls_in_minute"] for m in live.json()["minutes"]] == [1, 0, 0]
    for bad, says in (
        ({"from": "yesterday"}, "not an RFC 3339"),
        ({"from": "2026-01-01T00:00"}, "not an RFC 3339"),
        ({"to": "2026-01-01T00:00:30Z"}, "not a whole minute"),
        ({"from": "2026-01-02T00:00Z", "to": "2026-01-01T00:00Z"}, "is after"),
        ({"limit": 0}, "limit must be between"),
    ):
        response = client.get("/v1/runs/far/minutes", params=bad)
        assert response.status_code == 422, bad
        assert says in response.json()["detail"], response.json()
    assert client.get("/v1/runs/far/minutes", params={"limit": "x"}).status_code == 422


@pytest.mark.slow
def test_a_download_leaves_the_ingest_process_without_the_file_writers_libraries(
    database_url: str,
) -> None:
    # Polars, PyArrow and Numba's LLVM (~200 MiB) write the file in a child process; they
    # used to stay in the ingest process after the first download.
    import httpx

    from tests.fixtures.servers import start_ingest

    store(database_url, [attempt_row(run_id="served") for _ in range(4)])
    server = start_ingest(database_url)
    try:
        response = httpx.get(f"{server.http_url}/v1/runs/served/events.jsonl", timeout=60)
        assert response.status_code == 200 and response.content.count(b"\n") == 4
        maps = Path(f"/proc/{server.process.pid}/maps").read_text()
        loaded = [lib for lib in ("llvmlite", "polars", "pyarrow", "numba") if lib in maps]
        assert loaded == []
    finally:
        server.stop()
