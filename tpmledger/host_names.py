"""Which ``Host`` names a listener answers (DNS rebinding; docs/configuration.md#host-names).

A web page on ``evil.example`` can make its own name resolve to 127.0.0.1 and then talk to
a token-less tpmledger on loopback as if it were same-origin: the browser sends
``Host: evil.example``. So, when no token protects the listener, only requests naming it
by a loopback name, by the address it binds, or by a name in ``TPMLEDGER_ALLOWED_HOSTS``
are served; others are answered 421 Misdirected Request. Once tokens are configured they
protect every guarded request, and the Host header is checked only against an explicit
``TPMLEDGER_ALLOWED_HOSTS``. ``TPMLEDGER_ALLOWED_HOSTS='["*"]'`` turns the check off.

Shared by ingest's HTTP listener and the dashboard (neither imports the other).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

#: Answer to a request whose Host is not served (RFC 9110 §15.5.20).
MISDIRECTED = 421
_LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain"})
_ANY_ADDRESS = frozenset({"0.0.0.0", "::", ""})


def host_name(header: str) -> str:
    """The name of a ``Host`` header value, without port, brackets or a trailing dot."""
    value = header.strip().lower()
    if value.startswith("["):  # [::1]:8050
        return value[1 : value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


def _is_loopback(name: str) -> bool:
    if name in _LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class HostNames:
    """The Host check of one listener bound on ``bind_host``."""

    def __init__(self, bind_host: str, allowed: Iterable[str] = ()) -> None:
        self.explicit = [host_name(name) for name in allowed if name.strip()]
        self.any = "*" in self.explicit
        bound = host_name(bind_host)
        self._names = set(self.explicit)
        if bound not in _ANY_ADDRESS:
            self._names.add(bound)

    def serves(self, header: str | None, *, tokens_required: bool) -> bool:
        """True if a request with this ``Host`` header may be answered."""
        if self.any or header is None or not header.strip():
            return True  # no Host (HTTP/1.0): not a browser's rebinding request
        if tokens_required and not self.explicit:
            return True
        name = host_name(header)
        return name in self._names or _is_loopback(name)

    def refusal(self, header: str | None) -> str:
        """The text of the 421 answer: what to configure."""
        return (
            f"this server does not answer to the host name {host_name(header or '')!r}; "
            "add it to TPMLEDGER_ALLOWED_HOSTS (docs/configuration.md#host-names)\n"
        )
