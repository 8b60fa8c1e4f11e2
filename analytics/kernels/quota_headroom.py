"""Quota headroom (docs/metrics.md#quota-headroom): how much of a target's quota a minute
left unused, ``1 − used / quota``; not measured (None) without a quota, below 0 over it.

Storage reads each target-minute's use and quota (:mod:`storage.readers.target_minutes`);
the rule that turns them into headroom is analytics', here once, for the read API's
``/targets``, ``/metrics``' per-run series, the bottleneck verdict and the dashboard.
"""

from __future__ import annotations

from typing import Protocol

from tpmledger.analytics.kernels.figure_registry import figure


class TargetUse(Protocol):
    """What a target-minute reports of its use and quota."""

    @property
    def used_tpm(self) -> int: ...
    @property
    def used_rpm(self) -> int: ...
    @property
    def quota_tpm(self) -> float | None: ...
    @property
    def quota_rpm(self) -> float | None: ...


@figure("quota_headroom")
def headroom(used: float, quota: float | None) -> float | None:
    """``1 − used / quota``; None without a quota (none reported, or 0)."""
    return None if not quota else 1.0 - used / quota


def headroom_tokens(t: TargetUse) -> float | None:
    """The minute's headroom in tokens (prompt + completion against the TPM quota)."""
    return headroom(t.used_tpm, t.quota_tpm)


def headroom_requests(t: TargetUse) -> float | None:
    """The minute's headroom in requests (attempts against the RPM quota)."""
    return headroom(t.used_rpm, t.quota_rpm)
