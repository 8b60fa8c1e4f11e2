"""One cap sweep as the sweep page shows it: a point per cap, the knee and its thresholds.

SPEC §4: walking caps upward, cap c is accepted while sustained TPM rises by more than 2 %,
the retry rate rises by at most 1 point and the call success rate falls by at most
0.5 point against the previous cap; the knee (recommended cap) is the last accepted cap.
Points are read from each run's latest sealed snapshot metrics, never from raw spans.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from dashboard.data.run_records import RunRecord, load_sweep_runs


@dataclass(frozen=True)
class KneeThresholds:
    """The acceptance rule's parameters; printed with every result."""

    min_throughput_gain: float = 0.02
    max_retry_rate_rise: float = 0.01
    max_success_rate_drop: float = 0.005

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class SweepPoint:
    """One cap of the sweep (the newest sealed run at that cap)."""

    cap: int
    run_id: str
    sustained_tpm_total: float | None
    retry_rate: float | None
    call_success_rate: float | None
    ttft_p95_s: float | None


@dataclass
class SweepView:
    """Points in cap order, the knee (``None`` when there is nothing to accept) and the rule."""

    sweep_id: str
    points: list[SweepPoint] = field(default_factory=list)
    knee_cap: int | None = None
    thresholds: KneeThresholds = field(default_factory=KneeThresholds)
    # Runs of the sweep that cannot be placed (no cap declared, or never sealed).
    skipped_run_ids: list[str] = field(default_factory=list)


def _point(run: RunRecord) -> SweepPoint | None:
    metrics = run.metrics
    cap = metrics.get("concurrency_cap", run.concurrency_cap)
    if cap is None or run.snapshot is None:
        return None
    ttft = metrics.get("ttft_s") or {}
    return SweepPoint(
        cap=int(cap),
        run_id=run.run_id,
        sustained_tpm_total=metrics.get("sustained_tpm_total"),
        retry_rate=metrics.get("retry_rate"),
        call_success_rate=metrics.get("call_success_rate"),
        ttft_p95_s=ttft.get("p95"),
    )


def _accepted(prev: SweepPoint, cur: SweepPoint, rule: KneeThresholds) -> bool:
    if prev.sustained_tpm_total is None or cur.sustained_tpm_total is None:
        return False
    if cur.sustained_tpm_total <= prev.sustained_tpm_total * (1 + rule.min_throughput_gain):
        return False
    # A rate that was not measured cannot veto a cap (honesty: no figure, no verdict).
    retry_rise = _change(prev.retry_rate, cur.retry_rate)
    if retry_rise is not None and retry_rise > rule.max_retry_rate_rise:
        return False
    success_rise = _change(prev.call_success_rate, cur.call_success_rate)
    return success_rise is None or -success_rise <= rule.max_success_rate_drop


def _change(prev: float | None, cur: float | None) -> float | None:
    return None if prev is None or cur is None else cur - prev


def find_knee(points: list[SweepPoint], rule: KneeThresholds) -> int | None:
    """The last cap accepted walking upward from the smallest (SPEC §4)."""
    if not points:
        return None
    knee = points[0]
    for cur in points[1:]:
        if not _accepted(knee, cur, rule):
            break
        knee = cur
    return knee.cap


def load_sweep_view(url: str, sweep_id: str, rule: KneeThresholds | None = None) -> SweepView:
    """The sweep's points (newest run per cap), its knee and the thresholds used."""
    rule = rule or KneeThresholds()
    view = SweepView(sweep_id=sweep_id, thresholds=rule)
    by_cap: dict[int, tuple[str, SweepPoint]] = {}
    for run in load_sweep_runs(url, sweep_id):
        point = _point(run)
        if point is None:
            view.skipped_run_ids.append(run.run_id)
            continue
        seen = by_cap.get(point.cap)
        if seen is None or (run.last_event_utc or "") > seen[0]:
            by_cap[point.cap] = (run.last_event_utc or "", point)
    view.points = [by_cap[cap][1] for cap in sorted(by_cap)]
    view.knee_cap = find_knee(view.points, rule)
    return view


def sweep_summary(view: SweepView) -> dict[str, Any]:
    """The view as plain JSON-able data (for the page's table and the docs)."""
    return {
        "sweep_id": view.sweep_id,
        "knee_cap": view.knee_cap,
        "thresholds": view.thresholds.as_dict(),
        "points": [asdict(p) for p in view.points],
    }
