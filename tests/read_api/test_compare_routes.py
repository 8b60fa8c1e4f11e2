"""GET /v1/compare and the run object's diagnostics over a real PostgreSQL."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

import tpmledger.read_api as read_api
from tests.analytics.compare_builders import seed_profile
from tests.analytics.pitfall_runs import deadline_rows, seed_tool_run
from tests.analytics.seeding import store
from tests.storage.builders import attempt_row
from tpmledger.settings import Settings
from tpmledger.slo import parse_slo


def client(url: str, slo: str | None = None) -> TestClient:
    app = FastAPI()
    app.include_router(read_api.build_router(url, Settings(database_url=url, slo=slo)))
    return TestClient(app)


def test_compare_route_returns_the_documented_object(database_url: str) -> None:
    seed_profile(database_url, "a", calls=20, tokens=100, retried=2)
    seed_profile(database_url, "b", calls=14, tokens=100, retried=1)
    answer = client(database_url).get("/v1/compare", params={"a": "a", "b": "b"})
    assert answer.status_code == 200
    body = answer.json()
    assert (body["a"], body["b"], body["verdict"]) == ("a", "b", "regressed")
    assert body["params"]["resamples"] == 2000 and body["params"]["slo"] is None
    assert body["figures"]["sustained_tpm_total"]["interval"][1] < 0


def test_compare_route_errors(database_url: str) -> None:
    seed_profile(database_url, "a", calls=20, tokens=100, retried=2)
    store(database_url, [attempt_row(run_id="unsealed")])
    api = client(database_url)
    assert api.get("/v1/compare", params={"a": "a", "b": "zzz"}).status_code == 404
    assert api.get("/v1/compare", params={"a": "a", "b": "unsealed"}).status_code == 409
    bad = api.get("/v1/compare", params={"a": "a", "b": "a", "slo": "ttft=0"})
    assert bad.status_code == 400 and "positive" in bad.json()["detail"]
    assert api.get("/v1/compare", params={"a": "a"}).status_code == 422


def test_compare_route_uses_the_configured_slo(database_url: str) -> None:
    slo = parse_slo("ttft=0.5")
    seed_profile(database_url, "a", calls=20, tokens=100, retried=2, slo=slo)
    seed_profile(database_url, "b", calls=20, tokens=100, retried=2)  # sealed without the SLO
    body = client(database_url, slo="ttft=0.5").get("/v1/compare?a=a&b=b").json()
    assert body["params"]["slo"] == "ttft=0.5"
    assert body["verdict"] == "inconclusive" and "goodput_tpm_total" in body["missing"]


def test_run_object_carries_diagnostics_and_goodput(database_url: str) -> None:
    from tpmledger.analytics.seal.sealing import seal_run

    store(database_url, deadline_rows("late", held_s=[8.0, 2.0, 2.0, 2.0], deadline_s=5.0))
    seal_run(database_url, "late", slo=parse_slo("latency=5"))
    seed_tool_run(database_url, "agent")
    seal_run(database_url, "agent")

    run = client(database_url, slo="latency=5").get("/v1/runs/late").json()
    assert run["diagnostics"]["deadline_overrun"]["share"] == 0.25
    assert run["diagnostics"]["slot_held_by_tool"] is None
    # The one inner minute holds one good 150-token attempt.
    assert (run["goodput_tpm_total"], run["good_call_share"]) == (150.0, 0.75)
    agent = client(database_url).get("/v1/runs/agent").json()
    assert agent["diagnostics"]["slot_held_by_tool"]["share"] == 0.3
    assert agent["goodput_tpm_total"] is None and agent["goodput"] is None
