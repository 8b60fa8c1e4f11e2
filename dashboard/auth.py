"""The dashboard asks for a read token when tokens are configured (docs/dashboard.md#auth).

The pages show the same run data as the read API, so they need a token of scope ``read``
once any token is configured (``tpmledger tokens create NAME --scope read``,
``TPMLEDGER_READ_TOKENS``; docs/ingest.md#token-scopes); so does every dashboard request
but ``/healthz``. An ingest-only token is refused (403).

A browser logs in once, by HTTP Basic authentication (any user name, the token as
password) or by opening ``/?token=<token>``: the answer sets an ``HttpOnly``,
``SameSite=Lax`` cookie (``Secure`` too when served over TLS or behind a proxy that says
``X-Forwarded-Proto: https``), and a ``?token=`` login redirects to the same URL without
the token, so it does not stay in the address bar, history or logs. The cookie then
carries the page's own requests, and the read API accepts it too (download links), when
both are served under the same host name. Scripts may send ``Authorization: Bearer
<token>``. Tokens are compared as SHA-256 digests in constant time and re-read every few
seconds, so a revoke takes effect without a restart. With no token configured the
dashboard is open, and ``serve dashboard`` refuses a non-loopback address unless told
``--insecure``.
"""

from __future__ import annotations

import base64
import binascii
import threading
import time
from collections.abc import Iterable
from urllib.parse import urlencode

from flask import Request, Response, g

from tpmledger.storage.server.database import in_one_snapshot
from tpmledger.storage.writers.ingest_tokens import active_tokens
from tpmledger.token_scopes import COOKIE, READ, ScopedTokens, scoped_tokens

REALM = 'Basic realm="tpmledger dashboard: any user name, a read token as password"'
OPEN_PATHS = frozenset({"/healthz"})
LOGIN_PARAMETER = "token"
__all__ = ["COOKIE", "DashboardAuth", "presented_token", "remember"]


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
    """The accepted tokens and scopes (database and settings), re-read every ``refresh_s``,
    and at once (at most once per ``reread_min_s``) when an unknown token is presented, so
    a token created a moment ago logs in on its first request."""

    def __init__(
        self,
        database_url: str,
        static_tokens: Iterable[str] = (),
        refresh_s: float = 5.0,
        *,
        read_tokens: Iterable[str] = (),
        reread_min_s: float = 1.0,
    ) -> None:
        self.database_url = database_url
        self.ingest_static = list(static_tokens)
        self.read_static = list(read_tokens)
        self.refresh_s = refresh_s
        self.reread_min_s = reread_min_s
        self._tokens = ScopedTokens()
        self._read_started = float("-inf")  # monotonic time the last read began
        self._lock = threading.Lock()  # waitress serves from several threads

    def tokens(self) -> ScopedTokens:
        if time.monotonic() - self._read_started > self.refresh_s:
            with self._lock:
                if time.monotonic() - self._read_started > self.refresh_s:
                    self._read()
        return self._tokens

    def _read(self) -> None:
        started = time.monotonic()
        stored = in_one_snapshot(self.database_url, active_tokens)
        self._tokens = scoped_tokens(self.ingest_static, self.read_static, stored)
        self._read_started = started

    def _reread(self, asked_at: float) -> ScopedTokens:
        """Read the tokens again unless a read began after ``asked_at``; rate limited."""
        with self._lock:
            if self._read_started < asked_at:
                wait = self._read_started + self.reread_min_s - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                self._read()
        return self._tokens

    @property
    def required(self) -> bool:
        return self.tokens().required

    def allows(self, token: str | None) -> bool:
        """True when no token is required or ``token`` grants the read scope."""
        tokens = self.tokens()
        if not tokens.required or READ in tokens.scopes_of(token):
            return True
        if token and not tokens.scopes_of(token):  # unknown: perhaps created a moment ago
            return READ in self._reread(time.monotonic()).scopes_of(token)
        return False

    def check(self, request: Request) -> Response | None:
        """``None`` to let the request through, else the answer (401, 403, or the redirect
        that ends a ``?token=`` login)."""
        if request.path in OPEN_PATHS:
            return None
        login = request.args.get(LOGIN_PARAMETER)
        if login is not None:
            return self._login(request, login)
        cookie = request.cookies.get(COOKIE)
        given = presented_token(request)
        if given is not None and self.allows(given):
            if given != cookie and self.required:
                g.tpmledger_token = given  # set as a cookie on the answer (remember)
            return None
        if given is None and self.allows(cookie):
            return None
        return self._refusal(given if given is not None else cookie)

    def _login(self, request: Request, token: str) -> Response:
        """``?token=``: a valid read token is kept in the cookie and the browser sent on to
        the same URL without it; anything else is refused."""
        if not self.allows(token):
            return self._refusal(token)
        rest = [(k, v) for k, v in request.args.items(multi=True) if k != LOGIN_PARAMETER]
        clean = request.path + (f"?{urlencode(rest)}" if rest else "")
        answer = Response(status=303, headers={"Location": clean})
        answer.headers["Cache-Control"] = "no-store"
        answer.headers["Referrer-Policy"] = "no-referrer"
        if self.required:
            set_cookie(answer, request, token)
        return answer

    def _refusal(self, token: str | None) -> Response:
        if token and self.tokens().scopes_of(token):
            return Response(
                "this token cannot read: the dashboard needs a read token "
                "(tpmledger tokens create NAME --scope read)\n",
                status=403,
                mimetype="text/plain",
            )
        return Response(
            "a read token is required (tpmledger tokens create NAME --scope read)\n",
            status=401,
            headers={"WWW-Authenticate": REALM},
            mimetype="text/plain",
        )


def served_over_tls(request: Request) -> bool:
    """True on HTTPS, directly or behind a proxy that says so (``X-Forwarded-Proto``)."""
    forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    return request.scheme == "https" or forwarded == "https"


def set_cookie(response: Response, request: Request, token: str) -> None:
    """The login cookie: never readable by scripts, never sent on cross-site requests
    that change anything, and over TLS never sent in clear."""
    response.set_cookie(
        COOKIE, token, httponly=True, samesite="Lax", secure=served_over_tls(request), path="/"
    )


def remember(response: Response) -> Response:
    """``after_request``: keep a token accepted from a header in the login cookie."""
    from flask import request

    token = g.pop("tpmledger_token", None)
    if token is not None:
        set_cookie(response, request, token)
    return response
