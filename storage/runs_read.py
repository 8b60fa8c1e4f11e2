"""Run-level helpers of the read side: the unknown-run error and RFC 3339 times."""

from __future__ import annotations

from datetime import UTC, datetime


class UnknownRun(LookupError):
    """The run has no ``runs`` row (nothing was ever stored for it)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"unknown run {run_id!r}: no spans were stored for it")
        self.run_id = run_id


def ns_to_rfc3339(ns: int | None) -> str | None:
    """Nanoseconds since the epoch as RFC 3339 UTC with ``Z`` (SPEC §8)."""
    if ns is None:
        return None
    dt = datetime.fromtimestamp(ns // 1_000_000_000, tz=UTC).replace(
        microsecond=(ns % 1_000_000_000) // 1000
    )
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")
