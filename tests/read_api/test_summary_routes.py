"""GET /v1/runs/{run_id}/summary and GET /v1/keys on a real PostgreSQL."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import tpmledger.read_api as read_api
from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.provenance.dsse import verify_envelope
from tpmledger.provenance.in_toto_statement import PREDICATE_TYPE
from tpmledger.provenance.signing_keys import load_public_key_pem, rotate_signing_key
from tpmledger.settings import Settings
from tpmledger.storage.server.database import raw_transaction
from tpmledger.storage.writers.bulk_writer import write_attempts


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path)  # type: ignore[call-arg]


@pytest.fixture
def client(database_url: str, settings: Settings) -> TestClient:
    rows = [
        attempt_row(run_id="api-run", shard_id=str(i % 4), end_ns=BASE_NS + i * 7_000_000_000)
        for i in range(30)
    ]
    with raw_transaction(database_url) as conn:
        write_attempts(conn, rows)
    app = FastAPI()
    app.include_router(read_api.build_router(database_url, settings))
    return TestClient(app)


def test_summary_is_404_until_sealed_then_a_verifiable_envelope(
    client: TestClient, database_url: str
) -> None:
    missing = client.get("/v1/runs/api-run/summary")
    assert missing.status_code == 404
    assert "tpmledger analyze api-run" in missing.json()["detail"]

    sealed = seal_run(database_url, "api-run")
    envelope = client.get("/v1/runs/api-run/summary").json()
    assert set(envelope) == {"payload", "payloadType", "signatures"}
    keys = client.get("/v1/keys").json()["keys"]
    public = load_public_key_pem(keys[0]["pem"].encode())
    verified = verify_envelope(envelope, [public])
    assert verified.key_fingerprint == keys[0]["fingerprint"] == envelope["signatures"][0]["keyid"]
    statement = json.loads(base64.b64decode(envelope["payload"]))
    assert statement["predicateType"] == PREDICATE_TYPE
    assert statement["predicate"]["snapshot"]["seal"] == sealed.seal
    assert statement["predicate"]["attempts"] == 30
    assert statement["subject"][0]["digest"]["sha256"] == sealed.document["events"]["sha256"]


def test_keys_list_current_first_and_keep_rotated_ones(
    client: TestClient, settings: Settings
) -> None:
    first = client.get("/v1/keys").json()["keys"]
    assert [k["current"] for k in first] == [True]
    pem = client.get("/v1/keys/current.pem")
    assert pem.headers["content-type"].startswith("application/x-pem-file")
    assert pem.text == first[0]["pem"]
    rotate_signing_key(settings)
    after = client.get("/v1/keys").json()["keys"]
    assert [k["current"] for k in after] == [True, False]
    assert after[1]["fingerprint"] == first[0]["fingerprint"]
    assert after[0]["fingerprint"] != first[0]["fingerprint"]
