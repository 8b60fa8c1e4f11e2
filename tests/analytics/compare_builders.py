"""Runs with known throughput, retry and stall figures, sealed, for compare tests."""

from __future__ import annotations

from typing import Any

from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, MINUTE_NS, attempt_row
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.slo import Slo

SECOND_NS = 1_000_000_000


def profile_rows(
    run_id: str,
    *,
    calls: int,
    tokens: int,
    retried: int = 0,
    stalls: int = 0,
    minutes: int = 8,
    measured: bool = True,
    offset_minutes: int = 0,
    ttft_s: float | None = 0.2,
) -> list[tuple[Any, ...]]:
    """Per minute: ``calls`` logical calls of about ``tokens`` tokens each (a few tokens
    more or less per minute, so minutes differ), ``retried`` of them after a failed first
    attempt (resend count 1), and ``stalls`` extra attempts that timed out.

    ``measured=False`` leaves out resend counts and call ids (retries not measured).
    """
    rows = []
    for m in range(minutes):
        base = BASE_NS + (offset_minutes + m) * MINUTE_NS
        size = tokens + (m * 37) % 11 - 5
        resend = (lambda n: n) if measured else (lambda n: None)
        failed = {"status": "error", "prompt_tokens": None, "completion_tokens": None}
        attempts: list[dict[str, Any]] = []
        for i in range(calls):
            call = {"call_id": f"{run_id}-{m}-{i}", "call_id_explicit": True} if measured else {}
            if i < retried:
                attempts.append(
                    {**call, **failed, "resend_count": resend(0), "error_type": "rate_limited"}
                )
            attempts.append(
                {
                    **call,
                    "resend_count": resend(1 if i < retried else 0),
                    "prompt_tokens": size - size // 3,
                    "completion_tokens": size // 3,
                }
            )
        attempts += [{**failed, "resend_count": resend(0), "error_type": "ReadTimeout"}] * stalls
        for k, fields in enumerate(attempts):
            end = base + (1 + k % 58) * SECOND_NS + k // 58 * 1000
            rows.append(
                attempt_row(
                    run_id=run_id,
                    start_ns=end - SECOND_NS // 2,
                    end_ns=end,
                    ttft_s=ttft_s,
                    **fields,
                )
            )
    return rows


def seed_profile(url: str, run_id: str, *, slo: Slo | None = None, **profile: Any) -> None:
    """Store a run of :func:`profile_rows` and seal it."""
    store(url, profile_rows(run_id, **profile))
    seal_run(url, run_id, slo=slo)
