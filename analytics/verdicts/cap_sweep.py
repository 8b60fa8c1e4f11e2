"""Cap sweep and its knee (docs/metrics.md): runs sharing ``tpmledger.sweep.id``, one cap each.

For each cap: sustained TPM (total), retry rate, call success rate, TTFT p95, read from
each run's LATEST sealed snapshot. Walking caps upward, cap c is accepted while, against
the previous cap, throughput rises by more than ``min_throughput_gain`` (relative),
retry rate rises by at most ``max_retry_rate_rise`` and call success rate falls by at
most ``max_success_rate_drop`` (both absolute fractions: 0.01 = 1 point). The knee
(recommended cap) is the last accepted cap; the walk stops at the first rejection.
A rate that was not measured cannot veto a cap (no figure, no verdict); unknown
throughput always rejects. Several runs at one cap: the newest one counts.

Each cap says where its figures come from (docs/dashboard.md#sweeps): ``sealed`` (a final
snapshot, the run quiet since) or ``live`` (the live minute table, or a snapshot sealed
while the run was still receiving data). While any compared cap is live the result is
``provisional``: the walk uses the live figures (sustained TPM over closed minutes, call
success exact so far, TTFT p95 sketched within 1 %, docs/metrics.md#live-approximations)
and the recommendation is labelled as such.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy.orm import Session

from tpmledger.analytics.verdicts.bottleneck import current_bottleneck
from tpmledger.analytics.views.current_table import current_table
from tpmledger.analytics.views.live_view import live_figures
from tpmledger.storage.readers.live_read import RunState, run_states


@dataclass(frozen=True)
class SweepThresholds:
    """The acceptance rule's parameters; printed with every result."""

    min_throughput_gain: float = 0.02
    max_retry_rate_rise: float = 0.01
    max_success_rate_drop: float = 0.005

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class SweepPoint:
    """One cap of the sweep and the verdict of the walk on it."""

    cap: int
    run_id: str
    sustained_tpm_total: float | None
    retry_rate: float | None
    call_success_rate: float | None
    ttft_p95_s: float | None
    accepted: bool | None = None  # None: the walk stopped before this cap
    reason: str = ""
    status: str = "sealed"  # "sealed" | "live"
    # What bounds the run's throughput at this cap (docs/metrics.md#bottleneck).
    bottleneck: dict[str, Any] | None = field(default=None, hash=False, compare=False)


@dataclass
class SweepResult:
    """Points in cap order, the knee and the thresholds that produced it."""

    sweep_id: str
    points: list[SweepPoint] = field(default_factory=list)
    knee_cap: int | None = None
    thresholds: SweepThresholds = field(default_factory=SweepThresholds)
    skipped_run_ids: list[str] = field(default_factory=list)

    @property
    def provisional(self) -> bool:
        """True while any compared cap's run is still live."""
        return any(p.status == "live" for p in self.points)

    def as_dict(self) -> dict[str, Any]:
        return {
            "sweep_id": self.sweep_id,
            "knee_cap": self.knee_cap,
            "provisional": self.provisional,
            "thresholds": self.thresholds.as_dict(),
            "points": [asdict(p) for p in self.points],
            "skipped_run_ids": self.skipped_run_ids,
        }


def _verdict(prev: SweepPoint, cur: SweepPoint, rule: SweepThresholds) -> tuple[bool, str]:
    if not prev.sustained_tpm_total or cur.sustained_tpm_total is None:
        return False, "throughput not measured"
    gain = cur.sustained_tpm_total / prev.sustained_tpm_total - 1
    if gain <= rule.min_throughput_gain:
        return False, f"throughput {gain:+.1%} (needs > {rule.min_throughput_gain:+.1%})"
    notes = [f"throughput {gain:+.1%}"]
    if prev.retry_rate is None or cur.retry_rate is None:
        notes.append("retry rate not measured")
    elif cur.retry_rate - prev.retry_rate > rule.max_retry_rate_rise:
        rise = (cur.retry_rate - prev.retry_rate) * 100
        return False, f"retry rate +{rise:.2f} points (max +{rule.max_retry_rate_rise * 100:g})"
    if prev.call_success_rate is None or cur.call_success_rate is None:
        notes.append("success rate not measured")
    elif prev.call_success_rate - cur.call_success_rate > rule.max_success_rate_drop:
        drop = (prev.call_success_rate - cur.call_success_rate) * 100
        limit = rule.max_success_rate_drop * 100
        return False, f"success rate -{drop:.2f} points (max -{limit:g})"
    return True, ", ".join(notes)


def walk_caps(
    points: list[SweepPoint], rule: SweepThresholds
) -> tuple[list[SweepPoint], int | None]:
    """Points (sorted by cap) with verdicts, and the knee cap."""
    ordered = sorted(points, key=lambda p: p.cap)
    if not ordered:
        return [], None
    walked = [_with(ordered[0], True, "baseline (smallest cap)")]
    stopped = False
    for prev, cur in itertools.pairwise(ordered):
        if stopped:
            walked.append(_with(cur, None, "not reached: a smaller cap was rejected"))
            continue
        ok, reason = _verdict(prev, cur, rule)
        walked.append(_with(cur, ok, reason))
        stopped = not ok
    knee = [p.cap for p in walked if p.accepted][-1]
    return walked, knee


def walk_label(point: SweepPoint) -> str:
    """The walk's verdict on one cap in words. A live cap's verdict is provisional (its
    figures still change, a just-started cap has none yet): it is never called "rejected"."""
    if point.status == "live":
        label = {
            True: "accepted so far (live, provisional)",
            False: "not accepted so far (live, provisional)",
            None: "not reached yet (live)",
        }[point.accepted]
    else:
        label = {True: "accepted", False: "rejected", None: "not reached"}[point.accepted]
    return f"{label}: {point.reason}" if point.reason else label


def _with(point: SweepPoint, accepted: bool | None, reason: str) -> SweepPoint:
    return SweepPoint(**{**asdict(point), "accepted": accepted, "reason": reason})


def point_from_metrics(
    run_id: str, metrics: dict[str, Any], status: str = "sealed"
) -> SweepPoint | None:
    """A sweep point from a run object (None when the run declared no cap)."""
    cap = metrics.get("concurrency_cap")
    if cap is None:
        return None
    return SweepPoint(
        cap=int(cap),
        run_id=run_id,
        sustained_tpm_total=metrics.get("sustained_tpm_total"),
        retry_rate=metrics.get("retry_rate"),
        call_success_rate=metrics.get("call_success_rate"),
        ttft_p95_s=(metrics.get("ttft_s") or {}).get("p95"),
        status=status,
        bottleneck=metrics.get("bottleneck"),
    )


def is_final(state: RunState) -> bool:
    """The run's figures are final: a snapshot sealed once the run was quiet, and no data
    since. ``tpmledger analyze`` of a running run seals a snapshot that is not final."""
    return (
        state.snapshot_metrics is not None and bool(state.snapshot_final) and not state.has_new_data
    )


def _run_point(session: Session, state: RunState) -> SweepPoint | None:
    if is_final(state):
        assert state.snapshot_metrics is not None
        return point_from_metrics(state.run_id, state.snapshot_metrics)
    table = current_table(session, state.run_id)
    if table is None or not table.minutes:
        return None
    verdict = current_bottleneck(session, state.run_id, table=table)
    return point_from_metrics(
        state.run_id, {**live_figures(table), "bottleneck": verdict}, status="live"
    )


def load_sweep(
    session: Session, sweep_id: str, thresholds: SweepThresholds | None = None
) -> SweepResult:
    """The sweep from its runs' final snapshots or live figures, walked with ``thresholds``.

    ``session`` is a :func:`storage.server.database.read_view`, so every run of the sweep is read
    from one snapshot."""
    rule = thresholds or SweepThresholds()
    result = SweepResult(sweep_id=sweep_id, thresholds=rule)
    states = [s for s in run_states(session) if s.sweep_id == sweep_id]
    points = {s.run_id: _run_point(session, s) for s in states}
    newest: dict[int, tuple[Any, SweepPoint]] = {}
    for state in sorted(states, key=lambda s: s.run_id):
        point = points[state.run_id]
        if point is None:
            result.skipped_run_ids.append(state.run_id)
            continue
        seen = newest.get(point.cap)
        if seen is None or state.updated_at > seen[0]:
            newest[point.cap] = (state.updated_at, point)
    result.points, result.knee_cap = walk_caps([p for _, p in newest.values()], rule)
    return result
