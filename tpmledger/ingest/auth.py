"""Bearer-token check for both listeners (docs/ingest.md "Auth").

Tokens come from the database (``tpmledger tokens create``) and from
``settings.ingest_tokens``. Only SHA-256 digests are held; a presented token is hashed
and compared with every known digest by :func:`hmac.compare_digest`, so the time taken
does not depend on how much of a token matched. With no token configured anywhere,
ingest is open (and :meth:`Settings.check_bind_is_safe` keeps it on loopback).
Database tokens are re-read every ``refresh_s`` seconds, so a revoke takes effect
without a restart. Tokens never appear in logs or error messages.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Iterable

from tpmledger.ingest.error_taxonomy import DatabaseUnavailable, Unauthenticated
from tpmledger.storage.ingest_tokens import active_token_hashes, hash_token

log = logging.getLogger(__name__)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value, else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


class TokenVerifier:
    """Knows the accepted token digests and checks presented tokens in constant time."""

    def __init__(
        self, database_url: str | None, static_tokens: Iterable[str] = (), refresh_s: float = 5.0
    ) -> None:
        self._url = database_url
        self._static = [hash_token(t) for t in static_tokens if t]
        self._stored: list[bytes] = []
        self._refresh_s = refresh_s
        # Until the database tokens were read once, nobody knows whether auth is required.
        self._loaded = not database_url

    @property
    def required(self) -> bool:
        """True when at least one token is configured, so every request must carry one."""
        return bool(self._static or self._stored)

    def load(self) -> None:
        """Re-read the active database tokens (blocking; run it off the event loop)."""
        if self._url:
            self._stored = active_token_hashes(self._url)
            self._loaded = True

    async def refresh_forever(self) -> None:
        """Reload database tokens periodically; keeps the last known set if the DB is down."""
        while True:
            await asyncio.sleep(self._refresh_s if self._loaded else min(1.0, self._refresh_s))
            try:
                await asyncio.to_thread(self.load)
            except Exception as exc:  # the database may be down; keep the known tokens
                log.debug("could not refresh ingest tokens: %s", type(exc).__name__)

    def is_valid(self, token: str | None) -> bool:
        """True if no token is required, or ``token`` is one of the accepted tokens."""
        if not self.required:
            return True
        if not token:
            return False
        digest = hash_token(token)
        matched = False
        for known in (*self._static, *self._stored):
            # No early exit: every digest is compared.
            matched |= hmac.compare_digest(digest, known)
        return matched

    def check_authorization(self, authorization: str | None) -> None:
        """Raise :class:`Unauthenticated` unless the header carries an accepted token.

        Before the database tokens could be read (database down at start), only a static
        token is accepted; anything else is a retryable 503, never an open door.
        """
        token = bearer_token(authorization)
        if not self._loaded:
            if self._static and self.is_valid(token):
                return
            raise DatabaseUnavailable("ingest tokens not loaded yet (database unreachable)")
        if not self.is_valid(token):
            raise Unauthenticated("missing or invalid bearer token")
