"""Numbers past what the database or the bootstrap can hold are refused, never a 500."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

import tpmledger.read_api as read_api
from tpmledger.cli.main import main


def test_huge_numbers_in_read_api_queries(database_url: str) -> None:
    app = FastAPI()
    app.include_router(read_api.build_router(database_url))
    client = TestClient(app, raise_server_exceptions=False)
    for seed in (2**64, 10**30):
        answer = client.get("/v1/compare", params={"a": "x", "b": "y", "seed": seed})
        assert answer.status_code < 500, (seed, answer.text)
    answer = client.get("/v1/runs/x/consistency", params={"from": 1, "to": 2**31})
    assert answer.status_code == 422


def test_summary_export_of_a_huge_version(
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", database_url)
    argv = ["summary", "export", "x", "--version", str(2**31), "--out", str(tmp_path / "o"),
            "--data-dir", str(tmp_path / "d")]  # fmt: skip
    assert main(argv) == 1
    assert "error: " in capsys.readouterr().err
