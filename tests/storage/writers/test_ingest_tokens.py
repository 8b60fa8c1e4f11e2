"""Ingest tokens at rest: hashed, named, revocable."""

from __future__ import annotations

import hashlib

import psycopg
import pytest

from tpmledger.storage.server.database import in_one_snapshot, libpq_url
from tpmledger.storage.writers.ingest_tokens import (
    TokenNameTaken,
    active_token_hashes,
    create_token,
    hash_token,
    list_tokens,
    revoke_token,
)


def test_tokens_are_stored_only_as_sha256(database_url: str) -> None:
    token = create_token(database_url, "fleet-a")
    assert len(token) > 40
    with psycopg.connect(libpq_url(database_url)) as conn:
        rows = conn.execute("SELECT name, token_sha256 FROM ingest_tokens").fetchall()
        dump = str(conn.execute("SELECT * FROM ingest_tokens").fetchall())
    assert rows == [("fleet-a", hashlib.sha256(token.encode()).digest())]
    assert token not in dump
    assert in_one_snapshot(database_url, active_token_hashes) == [hash_token(token)]


def test_each_token_is_new_and_names_are_unique(database_url: str) -> None:
    first = create_token(database_url, "a")
    second = create_token(database_url, "b")
    assert first != second
    with pytest.raises(TokenNameTaken):
        create_token(database_url, "a")
    assert [t.name for t in in_one_snapshot(database_url, list_tokens)] == ["a", "b"]


def test_revoked_tokens_are_listed_but_not_active(database_url: str) -> None:
    keep = create_token(database_url, "keep")
    create_token(database_url, "drop")
    assert revoke_token(database_url, "drop") is True
    assert revoke_token(database_url, "drop") is False
    assert revoke_token(database_url, "missing") is False
    assert in_one_snapshot(database_url, active_token_hashes) == [hash_token(keep)]
    status = {t.name: t.revoked_at is not None for t in in_one_snapshot(database_url, list_tokens)}
    assert status == {"keep": False, "drop": True}


def test_tokens_created_before_scopes_keep_both(database_url: str) -> None:
    from tpmledger.storage.server import migrate
    from tpmledger.storage.server.database import get_engine
    from tpmledger.storage.writers.ingest_tokens import active_tokens

    migrate.downgrade(database_url, "0006")  # the schema before scopes
    get_engine(database_url).dispose()
    with psycopg.connect(libpq_url(database_url), autocommit=True) as conn:
        conn.execute(
            "INSERT INTO ingest_tokens (name, token_sha256) VALUES ('old', %s)",
            (hash_token("an-old-token"),),
        )
    migrate.upgrade(database_url)
    get_engine(database_url).dispose()
    new = create_token(database_url, "new", "read")
    assert sorted(in_one_snapshot(database_url, active_tokens)) == sorted(
        [(hash_token("an-old-token"), "all"), (hash_token(new), "read")]
    )
    assert [t.scope for t in in_one_snapshot(database_url, list_tokens)] == ["all", "read"]
    with pytest.raises(ValueError, match="scope"):
        create_token(database_url, "bad", "admin")
