"""What bounds a run's throughput: the bottleneck verdict (docs/metrics.md#bottleneck).

Over the run's inner minutes (strictly between its first and last minute, as sustained TPM),
the rules are tried in order; the first that holds is the verdict:

1. ``provider_quota`` — at least ``rate_limited_share`` of the attempts were rate limited,
   and at least ``quota_evidence_share`` of those fell in target-minutes whose quota
   headroom (tokens or requests) is at most ``quota_headroom_max`` or whose lowest
   remaining count is at most that share of the limit;
2. ``serving`` — at least ``serving_failure_share`` of the attempts failed with 5xx,
   timeouts or cancellations (rate limits are not counted here); or, with fewer than
   ``rate_limited_share`` rate limited, the servers' own metrics show a non-empty queue
   with a KV cache ≥ ``server_kv_cache_min`` full or preemptions in at least
   ``server_saturated_minute_share`` of the inner minutes (:mod:`.server_evidence`);
3. ``concurrency_cap`` — in-flight mean ≥ ``cap_full_fraction`` × cap in at least
   ``cap_bound_minute_share`` of the minutes, fewer than ``rate_limited_share`` of the
   attempts rate limited, and quota headroom ≥ ``cap_headroom_min`` wherever it is known
   in those minutes;
4. ``demand`` — in-flight mean below ``cap_full_fraction`` × cap in most minutes.

Otherwise ``verdict`` is ``None`` and ``reason`` names what is missing (no inner minute,
no concurrency cap declared, rate limits without quota telemetry, …). ``minutes`` lists
the minutes that carry the evidence; ``params`` the thresholds used; ``evidence`` the
counts behind the rules — with ``server`` when vLLM / SGLang metrics were joined to the run,
``serving_signals`` naming what a ``serving`` verdict rests on (``failures``, ``queue``,
``kv_cache``, ``preemption``) and ``server_confirms_cap`` when an idle server confirms a
``concurrency_cap`` verdict.

Pure rules over minute rows and :class:`~tpmledger.storage.readers.target_minutes.TargetMinute`\\ s:
the seal applies them to the sealed minute table, the read API and the run page to the
current one (:func:`current_bottleneck`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy.orm import Session

from tpmledger.analytics.kernels.figure_rules import clean
from tpmledger.analytics.kernels.quota_headroom import headroom_requests, headroom_tokens
from tpmledger.analytics.verdicts.server_evidence import (
    KV_CACHE_FULL,
    evidence_of,
    server_findings,
    signals_of,
)
from tpmledger.analytics.views.current_table import CurrentTable, current_table
from tpmledger.analytics.views.run_views import run_object
from tpmledger.storage.codecs.time_text import minute_text_ns
from tpmledger.storage.readers.server_minutes_read import ServerMinute, run_models, server_minutes
from tpmledger.storage.readers.target_minutes import TargetMinute, target_minutes
from tpmledger.storage.schema.minute_keys import WHOLE_RUN

VERDICTS: Final = ("provider_quota", "serving", "concurrency_cap", "demand")


@dataclass(frozen=True)
class BottleneckParams:
    """The thresholds of the rules, printed with every verdict."""

    rate_limited_share: float = 0.01
    quota_evidence_share: float = 0.5
    quota_headroom_max: float = 0.10
    serving_failure_share: float = 0.05
    cap_full_fraction: float = 0.90
    cap_bound_minute_share: float = 0.5
    cap_headroom_min: float = 0.20
    server_kv_cache_min: float = KV_CACHE_FULL
    server_saturated_minute_share: float = 0.5

    def as_dict(self, *, server: bool = False) -> dict[str, Any]:
        """The thresholds used: the server rules' only when server minutes were joined
        (so a verdict without them reads as it did before those rules existed)."""
        used = asdict(self)
        if not server:
            used = {k: v for k, v in used.items() if not k.startswith("server_")}
        return {**used, "minutes": "inner"}


@dataclass(frozen=True)
class _Minute:
    minute_ns: int
    in_flight_mean: float | None
    cap: int | None


def _pct(value: float) -> str:
    return f"{value * 100:.3g} %"


def _is_tight(t: TargetMinute, limit: float) -> bool:
    """The target's quota is (nearly) used up in this minute."""
    headrooms = (headroom_tokens(t), headroom_requests(t))
    if any(h is not None and h <= limit for h in headrooms):
        return True
    pairs = ((t.min_remaining_tokens, t.quota_tpm), (t.min_remaining_requests, t.quota_rpm))
    return any(left is not None and quota and left <= limit * quota for left, quota in pairs)


def _has_quota(t: TargetMinute) -> bool:
    return t.quota_tpm is not None or t.quota_rpm is not None


def _lowest_headroom(targets: Sequence[TargetMinute]) -> float | None:
    known = [
        h for t in targets for h in (headroom_tokens(t), headroom_requests(t)) if h is not None
    ]
    return min(known, default=None)


def _result(
    verdict: str | None,
    reason: str,
    minutes: Iterable[int],
    params: BottleneckParams,
    evidence: dict[str, Any],
) -> dict[str, Any]:
    return {
        "verdict": verdict,
        "reason": reason,
        "minutes": [minute_text_ns(m) for m in sorted(minutes)],
        "params": params.as_dict(server="server" in evidence),
        "evidence": evidence,
    }


def bottleneck_verdict(
    minutes: Sequence[dict[str, Any]],
    targets: Sequence[TargetMinute],
    params: BottleneckParams | None = None,
    servers: Sequence[ServerMinute] = (),
) -> dict[str, Any]:
    """The verdict from the whole-run minute rows (``minute_ns``, ``in_flight_mean``,
    ``concurrency_cap``), the run's target-minutes and its server minutes."""
    params = params or BottleneckParams()
    rows = sorted(
        (
            _Minute(int(r["minute_ns"]), r.get("in_flight_mean"), r.get("concurrency_cap"))
            for r in minutes
        ),
        key=lambda m: m.minute_ns,
    )
    inner = rows[1:-1]
    inner_ns = {m.minute_ns for m in inner}
    inner_targets = [t for t in targets if t.minute_ns in inner_ns]
    attempts = sum(t.used_rpm for t in inner_targets)
    limited = sum(t.rate_limited for t in inner_targets)
    serving = sum(t.serving_failures for t in inner_targets)
    evidence: dict[str, Any] = {
        "inner_minutes": len(inner),
        "attempts": attempts,
        "rate_limited": limited,
        "serving_failures": serving,
        "quota_values_ignored": sum(t.values_ignored for t in targets),
    }
    found = server_findings(inner_ns, servers, inner_targets, params)
    if found is not None:
        evidence["server"] = evidence_of(found)
    if not inner or attempts == 0:
        return _result(
            None,
            "no inner minute with attempts yet: the verdict needs attempts in minutes "
            "strictly between the run's first and last",
            [],
            params,
            evidence,
        )

    # 1. provider_quota
    if limited >= params.rate_limited_share * attempts:
        tight = [
            t for t in inner_targets if t.rate_limited and _is_tight(t, params.quota_headroom_max)
        ]
        in_tight = sum(t.rate_limited for t in tight)
        evidence["rate_limited_at_quota"] = in_tight
        if in_tight >= params.quota_evidence_share * limited:
            return _result(
                "provider_quota",
                f"{_pct(limited / attempts)} of attempts were rate limited "
                f"({limited} of {attempts}), {_pct(in_tight / limited)} of them in minutes at "
                f"≤ {_pct(params.quota_headroom_max)} quota headroom: the provider's quota "
                "binds; raising the cap only adds 429s — more quota or less demand is the "
                "remedy",
                {t.minute_ns for t in tight},
                params,
                evidence,
            )
    # 2. serving
    if serving >= params.serving_failure_share * attempts:
        per_minute: dict[int, list[int]] = {}
        for t in inner_targets:
            pair = per_minute.setdefault(t.minute_ns, [0, 0])
            pair[0] += t.serving_failures
            pair[1] += t.used_rpm
        failing = [
            m
            for m, (bad, total) in per_minute.items()
            if bad and bad >= params.serving_failure_share * total
        ]
        evidence["serving_signals"] = ["failures"] + (
            signals_of(found, found["saturated"]) if found else []
        )
        return _result(
            "serving",
            f"{_pct(serving / attempts)} of attempts failed on the serving side (5xx, "
            f"timeouts, cancellations: {serving} of {attempts}): fix or scale the serving "
            "side before tuning the cap",
            failing or [m for m, (bad, _) in per_minute.items() if bad],
            params,
            evidence,
        )
    saturated = found["saturated"] if found else []
    if (
        found
        and limited < params.rate_limited_share * attempts
        and len(saturated) >= params.server_saturated_minute_share * len(inner)
    ):
        signals = signals_of(found, saturated)
        evidence["serving_signals"] = signals
        full = [
            what
            for name, what in (
                ("kv_cache", f"its KV cache ≥ {_pct(params.server_kv_cache_min)} full"),
                ("preemption", "preempting requests"),
            )
            if name in signals
        ]
        return _result(
            "serving",
            f"in {len(saturated)} of {len(inner)} minutes the server's own metrics show "
            f"requests waiting in its queue with {' and '.join(full)}, while "
            f"{_pct(limited / attempts)} of attempts were rate limited: the serving side "
            "binds (clients see slow time to first token, not errors); scale or tune the "
            "servers before raising the cap",
            saturated,
            params,
            evidence,
        )
    if limited >= params.rate_limited_share * attempts:
        limited_targets = [t for t in inner_targets if t.rate_limited]
        if not any(_has_quota(t) for t in limited_targets):
            why = (
                "no quota telemetry (tpmledger.quota.tpm / .rpm or captured x-ratelimit-* "
                "headers) says whether the provider's quota binds"
            )
        else:
            why = (
                "the quota reported had more than "
                f"{_pct(params.quota_headroom_max)} headroom in most of those minutes: "
                "another limit answers 429"
            )
        return _result(
            None,
            f"{_pct(limited / attempts)} of attempts were rate limited, but {why}",
            {t.minute_ns for t in limited_targets},
            params,
            evidence,
        )

    # 3. concurrency_cap and 4. demand need the cap
    capped = [m for m in inner if m.cap]
    if not capped:
        return _result(
            None,
            "no concurrency cap declared (tpmledger.concurrency.cap): cannot tell whether "
            "the cap or demand bounds throughput",
            [],
            params,
            evidence,
        )
    bound = [
        m for m in capped if (m.in_flight_mean or 0.0) >= params.cap_full_fraction * (m.cap or 0)
    ]
    free = [m for m in capped if m not in bound]
    evidence |= {"minutes_with_cap": len(capped), "minutes_cap_full": len(bound)}
    if len(bound) >= params.cap_bound_minute_share * len(capped):
        bound_ns = {m.minute_ns for m in bound}
        lowest = _lowest_headroom([t for t in inner_targets if t.minute_ns in bound_ns])
        evidence["lowest_headroom"] = lowest
        if lowest is not None and lowest < params.cap_headroom_min:
            return _result(
                None,
                f"the cap is full in {len(bound)} of {len(capped)} minutes, but quota "
                f"headroom fell to {_pct(lowest)} in them (below "
                f"{_pct(params.cap_headroom_min)}): cap and quota bind together",
                bound_ns,
                params,
                evidence,
            )
        room = "" if lowest is None else f", quota headroom ≥ {_pct(lowest)}"
        return _result(
            "concurrency_cap",
            f"in-flight mean ≥ {_pct(params.cap_full_fraction)} of the cap in {len(bound)} of "
            f"{len(capped)} minutes, {_pct(limited / attempts)} rate limited{room}: the "
            "concurrency cap binds; a higher cap would raise throughput"
            + _server_confirms(found, bound_ns, params, evidence),
            bound_ns,
            params,
            evidence,
        )
    return _result(
        "demand",
        f"in-flight mean below {_pct(params.cap_full_fraction)} of the cap in {len(free)} of "
        f"{len(capped)} minutes: the workers do not offer more work; throughput is what "
        "they asked for",
        {m.minute_ns for m in free},
        params,
        evidence,
    )


def _server_confirms(
    found: dict[str, Any] | None,
    bound_ns: set[int],
    params: BottleneckParams,
    evidence: dict[str, Any],
) -> str:
    """The reason's ending when the servers were idle while the cap was full: the
    verdict is then confirmed by the serving side, not inferred from the client alone."""
    if not found:
        return ""
    idle = bound_ns & set(found["idle"])
    confirms = bool(bound_ns) and len(idle) >= params.cap_bound_minute_share * len(bound_ns)
    evidence["server_confirms_cap"] = confirms
    if not confirms:
        return ""
    return (
        f" — confirmed by the server's own metrics: idle (empty queue, KV cache below "
        f"{_pct(params.server_kv_cache_min)}, no preemptions) in {len(idle)} of those "
        f"{len(bound_ns)} minutes"
    )


def _minute_ns(value: Any) -> int:
    if isinstance(value, datetime):
        return int(value.timestamp()) * 1_000_000_000
    return int(value)


def current_bottleneck(
    session: Session,
    run_id: str,
    *,
    close_after_s: float = 120.0,
    table: CurrentTable | None = None,
    targets: Sequence[TargetMinute] | None = None,
) -> dict[str, Any] | None:
    """The verdict over the run's current minute table (sealed rows, live ones where new
    data arrived), with ``live``; None for an unknown run. A caller that holds the table
    or the target-minutes already passes them."""
    table = table or current_table(session, run_id, close_after_s=close_after_s)
    if table is None:
        return None
    rows = [{**r, "minute_ns": _minute_ns(r["minute_utc"])} for r in table.shard_rows(WHOLE_RUN)]
    if targets is None:
        targets = target_minutes(session, [run_id])
    servers = server_minutes(session, run_id, run_models(targets))
    return {**clean(bottleneck_verdict(rows, targets, servers=servers)), "live": table.live}


def counted_words(bottleneck: dict[str, Any] | None, run_attempts: int | None) -> str | None:
    """What the verdict counted, in words beside the run's own total: the verdict weighs the
    attempts of the inner minutes only, while the run's header counts every attempt."""
    evidence = (bottleneck or {}).get("evidence") or {}
    counted, inner = evidence.get("attempts"), evidence.get("inner_minutes")
    if counted is None or inner is None:
        return None
    total = f" of the run's {run_attempts:,}" if run_attempts is not None else ""
    return (
        f"The verdict counts the {counted:,}{total} attempts that ended in its {inner} inner "
        "minutes (strictly between the first and the last minute, which are partial); the "
        "run's attempt count includes every minute."
    )


def run_object_with_bottleneck(
    session: Session, run_id: str, close_after_s: float = 120.0, slo_text: str | None = None
) -> dict[str, Any]:
    """``GET /v1/runs/{run_id}``: the run object with ``bottleneck`` — the sealed verdict
    of the version shown, else (a live run, or a version sealed before verdicts) the
    current one, with ``counted`` (:func:`counted_words`). Raises ``UnknownRun`` for an
    unknown run."""
    run = run_object(session, run_id, close_after_s, slo_text)
    if run.get("bottleneck") is None:
        run["bottleneck"] = current_bottleneck(session, run_id, close_after_s=close_after_s)
    if run["bottleneck"] is not None:  # said at read time: a sealed verdict stays as sealed
        attempts = run.get("attempts")
        words = counted_words(run["bottleneck"], attempts if isinstance(attempts, int) else None)
        run["bottleneck"] = {**run["bottleneck"], "counted": words}
    return run
