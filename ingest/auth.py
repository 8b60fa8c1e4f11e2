"""Bearer-token check with scopes for both listeners (docs/ingest.md#token-scopes).

Tokens come from the database (``tpmledger tokens create NAME --scope ingest|read``) and
from settings (``TPMLEDGER_INGEST_TOKENS``, ``TPMLEDGER_READ_TOKENS``). Exports (HTTP
and gRPC) need the ``ingest`` scope; the read API and ``/metrics`` need ``read``
(:mod:`tpmledger.token_scopes` has the rules). Only SHA-256 digests are held and compared
in constant time. With no token configured anywhere, everything is open (and
:meth:`Settings.check_bind_is_safe` keeps it on loopback); once any token exists, every
guarded request needs one of the right scope: none or an unknown one is 401, one of the
other scope 403. Database tokens are re-read every ``refresh_s`` seconds, so a revoke
takes effect within that time without a restart; an unknown token triggers one re-read at
once (:meth:`TokenVerifier.admit`: at most one per ``reread_min_s``, shared by every
request waiting for it), so a token created a moment ago works on its first request.
Tokens never appear in logs or error messages.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable

from tpmledger.ingest.error_taxonomy import DatabaseUnavailable, Forbidden, Unauthenticated
from tpmledger.storage.server.database import in_one_snapshot
from tpmledger.storage.writers.ingest_tokens import active_tokens
from tpmledger.token_scopes import INGEST, ScopedTokens, scoped_tokens

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
    """Knows the accepted token digests and scopes; checks presented tokens in constant time."""

    def __init__(
        self,
        database_url: str | None,
        static_tokens: Iterable[str] = (),
        refresh_s: float = 5.0,
        *,
        read_tokens: Iterable[str] = (),
        reread_min_s: float = 1.0,
    ) -> None:
        self._url = database_url
        self._ingest_static = [t for t in static_tokens if t]
        self._read_static = [t for t in read_tokens if t]
        self._static = scoped_tokens(self._ingest_static, self._read_static)
        self._tokens: ScopedTokens = self._static
        self._refresh_s = refresh_s
        self._reread_min_s = reread_min_s
        self._read_started = float("-inf")  # monotonic time the last read began
        self._reread_lock: asyncio.Lock | None = None
        # Until the database tokens were read once, nobody knows whether auth is required.
        self._loaded = not database_url

    @property
    def required(self) -> bool:
        """True when at least one token is configured, so every request must carry one."""
        return self._tokens.required

    def load(self) -> None:
        """Re-read the active database tokens (blocking; run it off the event loop)."""
        if self._url:
            self._read_started = time.monotonic()
            stored = in_one_snapshot(self._url, active_tokens)
            self._tokens = scoped_tokens(self._ingest_static, self._read_static, stored)
            self._loaded = True

    async def refresh_forever(self) -> None:
        """Reload database tokens periodically; keeps the last known set if the DB is down."""
        while True:
            await asyncio.sleep(self._refresh_s if self._loaded else min(1.0, self._refresh_s))
            try:
                await asyncio.to_thread(self.load)
            except Exception as exc:  # the database may be down; keep the known tokens
                log.debug("could not refresh tokens: %s", type(exc).__name__)

    def is_valid(self, token: str | None, scope: str = INGEST) -> bool:
        """True if no token is required, or ``token`` grants ``scope``."""
        return not self.required or scope in self._tokens.scopes_of(token)

    def check_token(self, token: str | None, scope: str = INGEST) -> None:
        """Raise unless ``token`` grants ``scope`` (401 unknown, 403 the other scope).

        Before the database tokens could be read (database down at start), only a static
        token is accepted; anything else is a retryable 503, never an open door.
        """
        if not self._loaded:
            if scope in self._static.scopes_of(token):
                return
            raise DatabaseUnavailable("tokens not loaded yet (database unreachable)")
        if self.is_valid(token, scope):
            return
        if self._tokens.scopes_of(token):
            raise Forbidden(
                f"this token's scope does not include {scope!r} (docs/ingest.md#token-scopes)"
            )
        raise Unauthenticated("missing or invalid bearer token")

    def check_authorization(self, authorization: str | None, scope: str = INGEST) -> None:
        """:meth:`check_token` on the token of an ``Authorization: Bearer`` header."""
        self.check_token(bearer_token(authorization), scope)

    async def admit(self, token: str | None, scope: str = INGEST) -> None:
        """:meth:`check_token`, but an unknown token first makes the database tokens be
        re-read once, so a token created a moment ago is accepted on its first request.

        Re-reads are rate limited: at most one per ``reread_min_s`` (a request refused in
        between waits for the next one), and every request refused before a re-read began
        shares it, so a flood of unknown tokens costs one query per ``reread_min_s``.
        """
        try:
            self.check_token(token, scope)
        except Unauthenticated:
            if not token or not self._url or not self._loaded:
                raise
            await self._reread(asked_at=time.monotonic())
            self.check_token(token, scope)

    async def admit_authorization(self, authorization: str | None, scope: str = INGEST) -> None:
        """:meth:`admit` on the token of an ``Authorization: Bearer`` header."""
        await self.admit(bearer_token(authorization), scope)

    async def _reread(self, asked_at: float) -> None:
        if self._reread_lock is None:
            self._reread_lock = asyncio.Lock()
        async with self._reread_lock:
            if self._read_started >= asked_at:
                return  # a read that began after this token was refused already ran
            wait = self._read_started + self._reread_min_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                await asyncio.to_thread(self.load)
            except Exception as exc:  # the database may be down; keep the known tokens
                log.debug("could not re-read tokens: %s", type(exc).__name__)
