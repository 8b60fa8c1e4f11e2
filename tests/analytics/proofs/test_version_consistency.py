"""Consistency proofs between sealed versions: CLI, API, offline check, refusal on late data."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import tpmledger.read_api as read_api
from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, MINUTE_NS, attempt_row
from tpmledger.analytics.proofs.version_consistency import ConsistencyRefused, prove_consistency
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.cli.main import main
from tpmledger.provenance.consistency_document import check_consistency
from tpmledger.storage.server.database import in_one_snapshot

SECOND = 1_000_000_000


def _calls(minutes: range, second: int = 10) -> list[tuple[Any, ...]]:
    return [
        attempt_row(
            run_id="grow",
            start_ns=BASE_NS + m * MINUTE_NS + second * SECOND,
            end_ns=BASE_NS + m * MINUTE_NS + (second + 2) * SECOND,
        )
        for m in minutes
    ]


@pytest.fixture
def versions(database_url: str) -> str:
    """v1 over minutes 0-2; v2 over 0-4 (new minutes only); v3 after a late minute-1 call."""
    store(database_url, _calls(range(3)))
    seal_run(database_url, "grow")
    store(database_url, _calls(range(3, 5)))
    seal_run(database_url, "grow")
    store(database_url, _calls(range(1, 2), second=30))  # late: minute 03:45 changes
    seal_run(database_url, "grow")
    return database_url


@pytest.mark.slow
def test_a_later_version_is_proven_to_extend_an_earlier_one(versions: str) -> None:
    document = in_one_snapshot(versions, prove_consistency, "grow", 1, 2)
    assert set(document) == {"run_id", "from", "to", "proof"}
    assert document["from"]["tree_size"] == 3 and document["to"]["tree_size"] == 5
    assert check_consistency(document) is None
    other_root = "ab" * 32  # a tree the old one is not a prefix of
    tampered = {**document, "to": {**document["to"], "merkle_root": other_root}}
    assert check_consistency(tampered) is not None


@pytest.mark.slow
def test_late_data_is_refused_naming_the_changed_minutes(versions: str) -> None:
    with pytest.raises(ConsistencyRefused, match=r"2026-02-01T03:45:00Z"):
        in_one_snapshot(versions, prove_consistency, "grow", 2, 3)
    with pytest.raises(ConsistencyRefused, match=r"2026-02-01T03:45:00Z"):
        in_one_snapshot(versions, prove_consistency, "grow", 1, 3)


@pytest.mark.slow
def test_cli_and_api(
    versions: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", versions)
    proof = tmp_path / "proof.json"
    assert main(["summary", "prove-consistency", "grow", "--from", "1", "--to", "2",
                 "--out", str(proof)]) == 0  # fmt: skip
    for version in (1, 2):
        assert main(["summary", "export", "grow", "--version", str(version),
                     "--out", str(tmp_path / f"v{version}"),
                     "--data-dir", str(tmp_path / "data")]) == 0  # fmt: skip
    signed = ["--from-summary", str(tmp_path / "v1" / "summary.dsse.json"),
              "--to-summary", str(tmp_path / "v2")]  # fmt: skip
    capsys.readouterr()
    assert main(["summary", "verify-consistency", str(proof), *signed]) == 0
    assert "OK: version 2 of grow (5 minutes" in capsys.readouterr().out
    # The proof file alone ties nothing to a signed summary: refused unless --unsigned.
    assert main(["summary", "verify-consistency", str(proof)]) == 2
    assert main(["summary", "verify-consistency", str(proof), "--unsigned"]) == 0
    document = json.loads(proof.read_text())
    document["proof"][0] = "00" * 32
    proof.write_text(json.dumps(document))
    assert main(["summary", "verify-consistency", str(proof), *signed]) == 1
    capsys.readouterr()
    assert main(["summary", "prove-consistency", "grow", "--from", "2", "--to", "3"]) == 1
    assert "03:45:00Z" in capsys.readouterr().err

    app = FastAPI()
    app.include_router(read_api.build_router(versions))
    client = TestClient(app)
    answer = client.get("/v1/runs/grow/consistency", params={"from": 1, "to": 2})
    assert answer.status_code == 200 and check_consistency(answer.json()) is None
    refused = client.get("/v1/runs/grow/consistency", params={"from": 2, "to": 3})
    assert refused.status_code == 409 and "03:45:00Z" in refused.json()["detail"]
    missing = client.get("/v1/runs/grow/consistency", params={"from": 1, "to": 9})
    assert missing.status_code == 404
    # Versions beyond PostgreSQL's integer (or below 1) name no version: 422, never a 500.
    for old, new in ((1, 2**31), (1, 10**30), (0, 2), (-1, 2), (2**31, 2**31 + 1)):
        answer = client.get("/v1/runs/grow/consistency", params={"from": old, "to": new})
        assert answer.status_code == 422, (old, new, answer.text)
    capsys.readouterr()
    assert main(["summary", "prove-consistency", "grow", "--from", "1", "--to",
                 str(2**31)]) == 1  # fmt: skip
    assert "has no sealed version 2147483648" in capsys.readouterr().err


@pytest.mark.slow
def test_each_version_records_its_last_minute_and_a_rebase_names_late_data(
    versions: str,
) -> None:
    from tpmledger.storage.readers.snapshots_read import snapshot_at

    documents = {v: in_one_snapshot(versions, snapshot_at, "grow", v).document for v in (1, 2, 3)}  # type: ignore[union-attr]
    assert documents[1]["minutes"]["through_minute_utc"] == "2026-02-01T03:46:00Z"
    assert documents[2]["minutes"]["through_minute_utc"] == "2026-02-01T03:48:00Z"
    assert "rebased" not in documents[1] and "rebased" not in documents[2]
    assert documents[3]["rebased"] == {
        "from_version": 2,
        "minutes_changed": ["2026-02-01T03:45:00Z"],
        "late_attempts": 1,
    }


@pytest.mark.slow
def test_a_checkpoint_seals_closed_minutes_and_the_final_version_extends_it(
    database_url: str,
) -> None:
    from tpmledger.storage.readers.live_read import run_state

    store(database_url, _calls(range(5)))
    checkpoint = seal_run(database_url, "grow", end_before_ns=BASE_NS + 3 * MINUTE_NS)
    assert not checkpoint.final
    assert checkpoint.document["minutes"]["tree_size"] == 3
    assert checkpoint.document["minutes"]["through_minute_utc"] == "2026-02-01T03:46:00Z"
    assert checkpoint.metrics["attempts"] == 3
    # The open minutes are not in it: the run still reads as live, from the live table.
    state = in_one_snapshot(database_url, run_state, "grow")
    assert state is not None and state.has_new_data and state.is_live
    final = seal_run(database_url, "grow")
    assert final.final and final.version == checkpoint.version + 1
    assert "rebased" not in final.document
    proof = in_one_snapshot(
        database_url, prove_consistency, "grow", checkpoint.version, final.version
    )
    assert check_consistency(proof) is None
