"""Bearer tokens: created once with a scope, stored only as SHA-256, revocable
(docs/ingest.md#token-scopes).

The plaintext is returned exactly once by :func:`create_token` and never stored or logged.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from tpmledger.storage.schema.models import IngestToken
from tpmledger.storage.server.database import transaction
from tpmledger.token_scopes import INGEST, SCOPES, hash_token

__all__ = ["hash_token"]  # re-exported: where tokens are stored, their digest is defined


class TokenNameTaken(ValueError):
    """A token (active or revoked) already has this name."""


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """What ``tpmledger tokens list`` shows: never the token or its hash."""

    name: str
    created_at: datetime
    revoked_at: datetime | None
    scope: str  # "ingest", "read" or "all" (created before scopes)


def create_token(url: str, name: str, scope: str = INGEST) -> str:
    """Create a token named ``name`` of ``scope`` ("ingest" or "read"); returns the
    plaintext (shown to the user once)."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    token = "tpml_" + secrets.token_urlsafe(32)
    with transaction(url) as session:
        if session.scalar(select(IngestToken.id).where(IngestToken.name == name)) is not None:
            raise TokenNameTaken(f"a token named {name!r} already exists")
        session.add(IngestToken(name=name, token_sha256=hash_token(token), scope=scope))
    return token


def list_tokens(session: Session) -> list[TokenInfo]:
    """Every token, active and revoked, oldest first."""
    rows = session.scalars(select(IngestToken).order_by(IngestToken.created_at, IngestToken.id))
    return [TokenInfo(t.name, t.created_at, t.revoked_at, t.scope) for t in rows]


def revoke_token(url: str, name: str) -> bool:
    """Revoke the active token ``name``; False if there is none."""
    with transaction(url) as session:
        token = session.scalar(
            select(IngestToken).where(IngestToken.name == name, IngestToken.revoked_at.is_(None))
        )
        if token is None:
            return False
        token.revoked_at = datetime.now(UTC)
    return True


def active_token_hashes(session: Session) -> list[bytes]:
    """SHA-256 digests of every token that is not revoked."""
    query = select(IngestToken.token_sha256).where(IngestToken.revoked_at.is_(None))
    return [bytes(digest) for digest in session.scalars(query)]


def active_tokens(session: Session) -> list[tuple[bytes, str]]:
    """``(SHA-256 digest, scope)`` of every token that is not revoked."""
    query = select(IngestToken.token_sha256, IngestToken.scope).where(
        IngestToken.revoked_at.is_(None)
    )
    return [(bytes(digest), scope) for digest, scope in session.execute(query)]
