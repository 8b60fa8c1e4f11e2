"""The serving side's own evidence for the bottleneck verdict (docs/metrics.md#bottleneck).

Over the run's inner minutes, from the server minutes joined to the run
(:mod:`storage.readers.server_minutes_read`), a minute is

- ``queue`` — some server's waiting queue was non-empty (mean waiting > 0);
- ``kv_cache`` — some server's KV-cache use averaged ≥ ``server_kv_cache_min``;
- ``preemption`` — some server preempted (vLLM) or retracted (SGLang) requests;
- *saturated* — one server had a queue and, in the same minute, a full KV cache or
  preemptions: what a server that is the limit shows while its clients see slow TTFT;
- *idle* — every server reporting in it had an empty queue, its KV cache below the
  threshold and no preemptions: a server with room to spare.

Tokens are reconciled as the GenAI metrics are: what the servers counted (prompt +
generation) against what the run's spans report for the same models and minutes. The
server counting more means spans were lost or other clients share the server.

Pure rules over rows: the seal and the live read hand them the rows of their snapshot.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from tpmledger.storage.readers.server_minutes_read import ServerMinute
from tpmledger.storage.readers.target_minutes import TargetMinute

#: KV-cache use from which a server minute counts as full (``server_kv_cache_min``).
KV_CACHE_FULL: Final = 0.90


class ServerThresholds(Protocol):
    """The parameters the server rules read (``BottleneckParams``)."""

    @property
    def server_kv_cache_min(self) -> float: ...


@dataclass(frozen=True)
class DefaultThresholds:
    """The default thresholds, for readers that need no other rule (``/metrics``)."""

    server_kv_cache_min: float = KV_CACHE_FULL


def _queue(s: ServerMinute) -> bool:
    return (s.waiting_mean or 0.0) > 0


def _kv_full(s: ServerMinute, params: ServerThresholds) -> bool:
    return s.kv_cache_mean is not None and s.kv_cache_mean >= params.server_kv_cache_min


def _preempted(s: ServerMinute) -> bool:
    return (s.preemptions or 0.0) > 0


def is_saturated(s: ServerMinute, params: ServerThresholds) -> bool:
    """A queue and, in the same minute, a full KV cache or preemptions."""
    return _queue(s) and (_kv_full(s, params) or _preempted(s))


def _idle(s: ServerMinute, params: ServerThresholds) -> bool:
    measured = s.waiting_mean is not None or s.kv_cache_mean is not None
    quiet = (s.waiting_max or 0.0) == 0 and (s.waiting_mean or 0.0) == 0
    return measured and quiet and not _kv_full(s, params) and not _preempted(s)


def server_findings(
    inner_ns: Collection[int],
    servers: Sequence[ServerMinute],
    targets: Sequence[TargetMinute],
    params: ServerThresholds,
) -> dict[str, Any] | None:
    """What the servers say about the inner minutes, or None when none reported in them.

    ``queue`` / ``kv_cache`` / ``preemption`` / ``saturated`` / ``idle`` are lists of
    minutes (ns); ``tokens`` the reconciliation (None when no server counted tokens)."""
    rows = [s for s in servers if s.minute_ns in inner_ns]
    if not rows:
        return None
    by_minute: dict[int, list[ServerMinute]] = {}
    for s in rows:
        by_minute.setdefault(s.minute_ns, []).append(s)

    def minutes_where(holds: Any) -> list[int]:
        return sorted(m for m, found in by_minute.items() if any(holds(s) for s in found))

    return {
        "instances": len({s.instance for s in rows}),
        "minutes": sorted(by_minute),
        "queue": minutes_where(_queue),
        "kv_cache": minutes_where(lambda s: _kv_full(s, params)),
        "preemption": minutes_where(_preempted),
        "saturated": minutes_where(lambda s: is_saturated(s, params)),
        "idle": sorted(m for m, found in by_minute.items() if all(_idle(s, params) for s in found)),
        "tokens": _reconciled(rows, targets),
    }


def _reconciled(rows: Sequence[ServerMinute], targets: Sequence[TargetMinute]) -> Any:
    counted = [s for s in rows if s.prompt_tokens is not None or s.generation_tokens is not None]
    if not counted:
        return None
    minutes = {s.minute_ns for s in counted}
    models = {s.model for s in counted}
    server = sum((s.prompt_tokens or 0.0) + (s.generation_tokens or 0.0) for s in counted)
    client = sum(t.used_tpm for t in targets if t.minute_ns in minutes and t.model in models)
    return {
        "client": client,
        "server": server,
        "gap": server - client,
        "gap_share": (server - client) / server if server else None,
    }


def signals_of(findings: dict[str, Any], minutes: Collection[int]) -> list[str]:
    """Which server signals hold in ``minutes`` (in a fixed order)."""
    wanted = set(minutes)
    return [name for name in ("queue", "kv_cache", "preemption") if wanted & set(findings[name])]


def evidence_of(findings: dict[str, Any]) -> dict[str, Any]:
    """The findings as the verdict's ``evidence.server``: counts of minutes, and tokens."""
    counts = {
        name: len(findings[name])
        for name in ("minutes", "queue", "kv_cache", "preemption", "saturated", "idle")
    }
    return {"instances": findings["instances"], **counts, "tokens": findings["tokens"]}
