"""The Host-header check of the OTLP/HTTP listener, in plain ASGI
(docs/configuration.md#host-names).

Plain ASGI rather than Starlette's ``BaseHTTPMiddleware``, which would re-wrap every
request body stream that ``POST /v1/traces`` reads under its body budget.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tpmledger.host_names import MISDIRECTED, HostNames

Scope = dict[str, Any]
Receive = Callable[[], Any]
Send = Callable[[dict[str, Any]], Any]


class HostCheck:
    """Answer 421 to a request whose ``Host`` this listener does not serve."""

    def __init__(self, app: Any, hosts: HostNames, tokens_required: Callable[[], bool]) -> None:
        self._app = app
        self._hosts = hosts
        self._tokens_required = tokens_required

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            header = _header(scope, b"host")
            if not self._hosts.serves(header, tokens_required=self._tokens_required()):
                body = self._hosts.refusal(header).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": MISDIRECTED,
                        "headers": [
                            (b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self._app(scope, receive, send)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers") or ():
        if key == name:
            return bytes(value).decode("latin-1")
    return None
