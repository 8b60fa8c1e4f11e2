"""Quota headroom is analytics' rule over the target-minutes storage reads
(docs/metrics.md#quota-headroom)."""

from __future__ import annotations

import dataclasses

from tpmledger.analytics.kernels import figure_registry
from tpmledger.analytics.kernels.quota_headroom import (
    headroom,
    headroom_requests,
    headroom_tokens,
)
from tpmledger.storage.readers.target_minutes import TargetMinute


def _minute(**figures: object) -> TargetMinute:
    base = {
        "run_id": "r", "provider": "openai", "model": "m", "minute_ns": 0, "used_tpm": 900,
        "used_rpm": 30, "rate_limited": 0, "serving_failures": 0, "quota_tpm": 1000.0,
        "quota_rpm": None, "min_remaining_tokens": None, "min_remaining_requests": None,
        "values_ignored": 0,
    }  # fmt: skip
    return TargetMinute(**(base | figures))  # type: ignore[arg-type]


def test_headroom_is_the_unused_share_of_the_quota() -> None:
    assert headroom(900, 1000.0) == 1 - 900 / 1000
    assert headroom(1200, 1000.0) == 1 - 1200 / 1000  # over the quota: below 0
    assert headroom(5, None) is None and headroom(5, 0.0) is None  # no quota: not measured


def test_a_target_minute_has_headroom_in_tokens_and_in_requests() -> None:
    minute = _minute(quota_rpm=60.0)
    assert headroom_tokens(minute) == 1 - 900 / 1000
    assert headroom_requests(minute) == 1 - 30 / 60
    assert headroom_requests(_minute()) is None


def test_storage_reads_use_and_quota_only() -> None:
    """The rule lives here once: storage's rows carry no headroom of their own."""
    fields = {f.name for f in dataclasses.fields(TargetMinute)}
    assert not any("headroom" in name for name in fields | set(vars(TargetMinute)))
    assert figure_registry.FIGURES["quota_headroom"].__module__.endswith("quota_headroom")
