"""Error classes: which failed attempts were rate limited, failed on the serving side, were
the client's fault, or none of these (docs/metrics.md#error-classes).

One classification for every reader: :func:`error_class` (a pure function of an attempt's
``error_type`` and HTTP status, used for the ``error_class`` label of ``/metrics``) and the
SQL conditions :data:`RATE_LIMITED_SQL` / :data:`SERVING_SQL` that the quota and
bottleneck reads (:mod:`storage.readers.target_minutes`) run over stored attempts are built from
the same spellings below, and a test holds them equal.

- ``rate_limited``: HTTP 429, or an error type ``429`` / ``http_429``, starting with
  ``rate_limit`` (``rate_limit_exceeded``), or containing ``ratelimit`` (any SDK's
  ``RateLimitError``);
- ``serving``: HTTP 5xx, error types ``5xx`` / ``http_5xx``, and those naming a timeout,
  a cancellation, an overloaded or unavailable server, an internal server error or a lost
  connection (``APITimeoutError``, ``InternalServerError``, ``APIConnectionError``, …);
- ``client``: any other 4xx (``http_400``, ``BadRequestError``, ``AuthenticationError`` …);
- ``other``: everything else (e.g. ``error``: a span status without a type).
"""

from __future__ import annotations

import re
from typing import Final, Literal

ErrorClass = Literal["rate_limited", "serving", "client", "other"]
ERROR_CLASSES: Final[tuple[ErrorClass, ...]] = ("rate_limited", "serving", "client", "other")

#: Error types (exactly) that mean 429.
RATE_LIMIT_TYPES: Final = ("429", "http_429")
#: Lower-cased error types starting with this are rate limits.
RATE_LIMIT_PREFIX: Final = "rate_limit"
#: Lower-cased error types containing this are rate limits (``RateLimitError``).
RATE_LIMIT_MARKER: Final = "ratelimit"
#: Lower-cased error types containing one of these failed on the serving side.
SERVING_MARKERS: Final = (
    "timeout", "timed_out", "timedout", "deadline", "cancel", "server_error", "overloaded",
    "unavailable", "internalserver", "connection", "connecterror", "badgateway",
    "gatewaytimeout", "remoteprotocol", "http_408", "http_499",
)  # fmt: skip
#: Lower-cased error types containing one of these are the client's fault (SDK 4xx classes).
CLIENT_MARKERS: Final = (
    "badrequest", "authentication", "permissiondenied", "notfound", "conflict",
    "unprocessable", "invalid_request",
)  # fmt: skip

_STATUS_TYPE: Final = re.compile(r"(?:http_)?([1-5][0-9][0-9])")


def error_class(error_type: str | None, http_status: int | None = None) -> ErrorClass:
    """The class of one failed attempt from its ``error_type`` and HTTP status."""
    lowered = (error_type or "").lower()
    status = http_status
    if status is None and (found := _STATUS_TYPE.fullmatch(lowered)):
        status = int(found.group(1))
    if (
        status == 429
        or lowered in RATE_LIMIT_TYPES
        or lowered.startswith(RATE_LIMIT_PREFIX)
        or RATE_LIMIT_MARKER in lowered
    ):
        return "rate_limited"
    if (status is not None and status >= 500) or any(m in lowered for m in SERVING_MARKERS):
        return "serving"
    if (status is not None and 400 <= status < 500) or any(m in lowered for m in CLIENT_MARKERS):
        return "client"
    return "other"


# The same rules over stored attempts ``x`` (psycopg parameters ``%(serving)s``: the
# LIKE patterns of :data:`SERVING_PATTERNS`). In LIKE, ``\\_`` is a literal underscore.
def _like(text: str) -> str:
    return text.replace("_", "\\_")


_TYPES_SQL: Final = ", ".join(f"'{t}'" for t in RATE_LIMIT_TYPES)
RATE_LIMITED_SQL: Final = f"""(x.http_status = 429 OR x.error_type IN ({_TYPES_SQL})
    OR lower(x.error_type) LIKE '{_like(RATE_LIMIT_PREFIX)}%%'
    OR lower(x.error_type) LIKE '%%{_like(RATE_LIMIT_MARKER)}%%')"""
SERVING_SQL: Final = """(x.status = 'error' AND (x.http_status >= 500
    OR x.error_type ~ '^(http_)?5[0-9][0-9]$' OR lower(x.error_type) LIKE ANY(%(serving)s)))"""
#: LIKE patterns of :data:`SERVING_MARKERS`.
SERVING_PATTERNS: Final = [f"%{_like(m)}%" for m in SERVING_MARKERS]
