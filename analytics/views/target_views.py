"""``GET /v1/runs/{run_id}/targets``: used versus quota per target and minute
(docs/metrics.md#quota-headroom).

Read straight from the stored attempts (:mod:`tpmledger.storage.readers.target_minutes`), live or
sealed alike; only minutes in which the target has attempts are listed.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from tpmledger.analytics.kernels.figure_rules import clean
from tpmledger.analytics.kernels.quota_headroom import headroom_requests, headroom_tokens
from tpmledger.storage.codecs.time_text import minute_text_ns
from tpmledger.storage.readers.live_read import run_state
from tpmledger.storage.readers.runs_read import UnknownRun
from tpmledger.storage.readers.target_minutes import TargetMinute, target_minutes

#: Keys of one minute of a target, in the documented order.
TARGET_MINUTE_KEYS: tuple[str, ...] = (
    "minute_utc",
    "quota_tpm",
    "quota_rpm",
    "used_tpm",
    "used_rpm",
    "headroom_tokens",
    "headroom_requests",
    "min_remaining_tokens",
    "min_remaining_requests",
    "rate_limited",
)


def _number(value: float | None) -> float | int | None:
    if value is None:
        return None
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def _minute(t: TargetMinute) -> dict[str, Any]:
    return {
        "minute_utc": minute_text_ns(t.minute_ns),
        "quota_tpm": _number(t.quota_tpm),
        "quota_rpm": _number(t.quota_rpm),
        "used_tpm": t.used_tpm,
        "used_rpm": t.used_rpm,
        "headroom_tokens": clean(headroom_tokens(t)),
        "headroom_requests": clean(headroom_requests(t)),
        "min_remaining_tokens": _number(t.min_remaining_tokens),
        "min_remaining_requests": _number(t.min_remaining_requests),
        "rate_limited": t.rate_limited,
    }


def targets_object(session: Session, run_id: str) -> dict[str, Any]:
    """``{"targets": [{provider, model, minutes: [...]}], "quota_values_ignored": n}``;
    raises :class:`UnknownRun` for an unknown run."""
    if run_state(session, run_id) is None:
        raise UnknownRun(run_id)
    targets: dict[tuple[str | None, str | None], list[dict[str, Any]]] = {}
    ignored = 0
    for t in target_minutes(session, [run_id]):
        targets.setdefault((t.provider, t.model), []).append(_minute(t))
        ignored += t.values_ignored
    return {
        "targets": [
            {"provider": provider, "model": model, "minutes": minutes}
            for (provider, model), minutes in targets.items()
        ],
        # Rate-limit values (declared or header) that were not non-negative numbers.
        "quota_values_ignored": ignored,
    }
