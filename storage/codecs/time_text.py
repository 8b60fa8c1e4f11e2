"""How tpmledger writes a moment as text: RFC 3339 in UTC with ``Z``, in two precisions.

Minutes are written to the second (``2026-02-01T03:44:00Z``: minute keys in the API, the
pages, leaves and proofs); moments to the millisecond, truncated
(``2026-02-01T03:44:07.123Z``: ``computed_at``, ``data_as_of``, first and last events).
Sealed documents hold these texts, so changing either changes seals: both are defined
here once.
"""

from __future__ import annotations

from datetime import UTC, datetime

MINUTE_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_NS = 1_000_000_000


def minute_text(moment: datetime) -> str:
    """``2026-02-01T03:44:00Z``: a minute (or any moment, to the second) in UTC."""
    return moment.astimezone(UTC).strftime(MINUTE_FORMAT)


def minute_text_ns(ns: int) -> str:
    """:func:`minute_text` of nanoseconds since the epoch (seconds truncated from ns)."""
    return datetime.fromtimestamp(ns // _NS, tz=UTC).strftime(MINUTE_FORMAT)


def utc_ms(moment: datetime) -> str:
    """``2026-02-01T03:44:07.123Z``: a moment in UTC, milliseconds truncated."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def utc_ms_or_none(moment: datetime | None) -> str | None:
    """:func:`utc_ms`, or ``None`` for no moment."""
    return None if moment is None else utc_ms(moment)


def ns_to_rfc3339(ns: int | None) -> str | None:
    """Nanoseconds since the epoch as :func:`utc_ms` text, or ``None``."""
    if ns is None:
        return None
    moment = datetime.fromtimestamp(ns // _NS, tz=UTC).replace(microsecond=(ns % _NS) // 1000)
    return utc_ms(moment)
