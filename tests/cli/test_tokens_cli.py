"""``tpmledger tokens create|list|revoke`` through the real CLI entry point."""

from __future__ import annotations

import json

import pytest

from tpmledger.cli.main import main
from tpmledger.storage.server.database import in_one_snapshot
from tpmledger.storage.writers.ingest_tokens import active_token_hashes, hash_token


@pytest.fixture
def cli_env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TPMLEDGER_DATABASE_URL", database_url)
    return database_url


def test_create_prints_the_token_once_and_stores_its_hash(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["tokens", "create", "fleet-a"]) == 0
    out, err = capsys.readouterr()
    token = out.strip()
    assert token and "\n" not in token
    assert "shown only once" in err
    assert in_one_snapshot(cli_env, active_token_hashes) == [hash_token(token)]

    assert main(["tokens", "create", "fleet-a"]) == 1
    assert "already exists" in capsys.readouterr().err


def test_list_shows_names_never_tokens(cli_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tokens", "list"]) == 0
    assert "no tokens" in capsys.readouterr().out
    main(["tokens", "create", "fleet-a"])
    token = capsys.readouterr().out.strip()
    assert main(["tokens", "list", "--json"]) == 0
    out = capsys.readouterr().out
    assert token not in out
    (row,) = json.loads(out)["tokens"]
    assert row["name"] == "fleet-a" and row["status"] == "active"
    assert row["created_utc"].endswith("Z") and row["revoked_utc"] is None
    assert main(["tokens", "list"]) == 0
    table = capsys.readouterr().out
    assert "fleet-a" in table and "active" in table and token not in table


def test_revoke(cli_env: str, capsys: pytest.CaptureFixture[str]) -> None:
    main(["tokens", "create", "fleet-a"])
    capsys.readouterr()
    assert main(["tokens", "revoke", "fleet-a"]) == 0
    assert in_one_snapshot(cli_env, active_token_hashes) == []
    assert main(["tokens", "revoke", "fleet-a"]) == 1
    assert "no active token" in capsys.readouterr().err
    main(["tokens", "list", "--json"])
    assert json.loads(capsys.readouterr().out)["tokens"][0]["status"] == "revoked"


def test_help_explains_every_action(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["tokens", "--help"])
    text = capsys.readouterr().out
    for action in ("create", "list", "revoke"):
        assert action in text


def test_create_with_a_scope_and_list_shows_it(
    cli_env: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from tpmledger.storage.writers.ingest_tokens import active_tokens

    assert main(["tokens", "create", "readers", "--scope", "read"]) == 0
    _, err = capsys.readouterr()
    assert "read token 'readers' created" in err and "/?token=" in err
    assert main(["tokens", "create", "fleet"]) == 0  # ingest unless told otherwise
    fleet = capsys.readouterr().out.strip()
    assert sorted(scope for _, scope in in_one_snapshot(cli_env, active_tokens)) == [
        "ingest",
        "read",
    ]
    assert (hash_token(fleet), "ingest") in in_one_snapshot(cli_env, active_tokens)
    main(["tokens", "list", "--json"])
    rows = {r["name"]: r["scopes"] for r in json.loads(capsys.readouterr().out)["tokens"]}
    assert rows == {"readers": ["read"], "fleet": ["ingest"]}
    with pytest.raises(SystemExit):
        main(["tokens", "create", "x", "--scope", "admin"])
