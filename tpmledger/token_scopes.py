"""Token scopes (docs/ingest.md#token-scopes): ``ingest`` writes, ``read`` reads.

- ``ingest``: ``POST /v1/traces``, ``/v1/metrics``, ``/v1/logs`` and OTLP/gRPC Export;
- ``read``: the read API (``/v1/runs…``, ``/v1/keys``), the dashboard and ``/metrics``.

A token of one scope cannot use the other. Tokens stored before scopes existed keep
both (stored scope ``all``). Tokens from ``TPMLEDGER_INGEST_TOKENS`` (and its ``_FILE``)
also read as long as no read token is configured anywhere — the behaviour before scopes,
so an existing deployment keeps working; the first read token (``tpmledger tokens create
NAME --scope read`` or ``TPMLEDGER_READ_TOKENS``) makes them ingest-only.

Only SHA-256 digests are held, and a presented token is compared with every digest by
:func:`hmac.compare_digest` with no early exit. This module is shared by ingest and the
dashboard (neither imports the other) and imports no database code.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

INGEST = "ingest"
READ = "read"
#: Stored for tokens created before scopes existed: both.
ALL = "all"
SCOPES = (INGEST, READ)
#: The HttpOnly cookie the dashboard sets after a login, accepted by the read API too.
COOKIE = "tpmledger_token"

_STORED = {INGEST: frozenset({INGEST}), READ: frozenset({READ}), ALL: frozenset(SCOPES)}


def hash_token(token: str) -> bytes:
    """The SHA-256 digest under which a token is stored and compared."""
    return hashlib.sha256(token.encode("utf-8")).digest()


def stored_scopes(value: str) -> frozenset[str]:
    """The scopes a stored ``scope`` value grants (unknown values grant nothing)."""
    return _STORED.get(value, frozenset())


@dataclass(frozen=True)
class ScopedTokens:
    """Every accepted token digest with the scopes it grants."""

    entries: tuple[tuple[bytes, frozenset[str]], ...] = ()

    @property
    def required(self) -> bool:
        """True once any token is configured: then every guarded request needs one."""
        return bool(self.entries)

    def scopes_of(self, token: str | None) -> frozenset[str]:
        """The scopes ``token`` grants (empty for an unknown or missing token)."""
        if not token:
            return frozenset()
        presented = hash_token(token)
        granted: frozenset[str] = frozenset()
        for digest, scopes in self.entries:
            # No early exit: every digest is compared, so the time tells nothing.
            if hmac.compare_digest(presented, digest):
                granted = granted | scopes
        return granted


def scoped_tokens(
    ingest_tokens: Iterable[str],
    read_tokens: Iterable[str],
    stored: Iterable[tuple[bytes, str]] = (),
) -> ScopedTokens:
    """The accepted tokens: from settings (plaintext) and the database (digest, scope)."""
    stored = list(stored)
    read_list = [t for t in read_tokens if t]
    any_read = bool(read_list) or any(scope == READ for _, scope in stored)
    # Before scopes, TPMLEDGER_INGEST_TOKENS also read; they still do until a read token exists.
    ingest_scopes = frozenset({INGEST}) if any_read else frozenset(SCOPES)
    entries = [(hash_token(t), ingest_scopes) for t in ingest_tokens if t]
    entries += [(hash_token(t), frozenset({READ})) for t in read_list]
    entries += [(digest, stored_scopes(scope)) for digest, scope in stored]
    return ScopedTokens(tuple(entries))
