"""The dashboard asks for an ingest token when tokens are configured (docs/dashboard.md#auth).

The pages show the same run data as the read API, which requires a token once any is
configured (``tpmledger tokens create``, ``TPMLEDGER_INGEST_TOKENS``): so does every
dashboard request but ``/healthz``. A browser gets HTTP Basic authentication (any user
name, the token as password), or opens ``/?token=<token>`` once; either sets an HttpOnly,
same-site cookie that the page's own requests then carry. Scripts may send
``Authorization: Bearer <token>``. Tokens
are compared as SHA-256 digests in constant time and re-read every few seconds, so a
revoke takes effect without a restart. With no token configured the dashboard is open,
and ``serve dashboard`` refuses a non-loopback address unless told ``--insecure``.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import time
from collections.abc import Iterable

from flask import Request, Response, g

from tpmledger.storage.ingest_tokens import active_token_hashes, hash_token

REALM = 'Basic realm="tpmledger dashboard: any user name, an ingest token as password"'
OPEN_PATHS = frozenset({"/healthz"})
COOKIE = "tpmledger_token"


def presented_token(request: Request) -> str | None:
    """The token of a Bearer or Basic ``Authorization`` header (Basic: the password)."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        _, _, password = decoded.partition(":")
        return password or None
    return None


class DashboardAuth:
    """The accepted token digests (database and settings), re-read every ``refresh_s``."""

    def __init__(
        self, database_url: str, static_tokens: Iterable[str] = (), refresh_s: float = 5.0
    ) -> None:
        self.database_url = database_url
        self.static = [hash_token(t) for t in static_tokens]
        self.refresh_s = refresh_s
        self._digests: list[bytes] = []
        self._read_at = float("-inf")

    def digests(self) -> list[bytes]:
        if time.monotonic() - self._read_at > self.refresh_s:
            self._digests = [*self.static, *active_token_hashes(self.database_url)]
            self._read_at = time.monotonic()
        return self._digests

    @property
    def required(self) -> bool:
        return bool(self.digests())

    def allows(self, token: str | None) -> bool:
        digests = self.digests()
        if not digests:
            return True
        if token is None:
            return False
        presented = hash_token(token)
        # Compare with every digest (no early exit): the time does not tell which matched.
        matches = [hmac.compare_digest(presented, d) for d in digests]
        return any(matches)

    def check(self, request: Request) -> Response | None:
        """``None`` to let the request through, else the 401 answer."""
        if request.path in OPEN_PATHS:
            return None
        cookie = request.cookies.get(COOKIE)
        given = presented_token(request) or request.args.get("token")
        if given is not None and self.allows(given):
            if given != cookie and self.required:
                g.tpmledger_token = given  # set as a cookie on the answer (remember)
            return None
        if cookie is not None and self.allows(cookie):
            return None
        if not self.required:
            return None
        return Response(
            "an ingest token is required (tpmledger tokens create NAME)\n",
            status=401,
            headers={"WWW-Authenticate": REALM},
            mimetype="text/plain",
        )


def remember(response: Response) -> Response:
    """``after_request``: keep an accepted token in an HttpOnly, same-site cookie."""
    token = g.pop("tpmledger_token", None)
    if token is not None:
        response.set_cookie(COOKIE, token, httponly=True, samesite="Strict")
    return response
