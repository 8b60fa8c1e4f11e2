"""The simulator's own counters: per shard, summed over the fleet, with derived figures.

These are what the simulator itself observed (calls, attempts, outcomes, tokens reported in
``usage``, spans ended and exported), independent of what any receiver stored — tests compare
the two, and the knee test asserts on these alone.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any


@dataclass
class ShardCounters:
    """Running totals of one shard (all attempts, all calls)."""

    calls_started: int = 0  # calls that reached a first attempt
    calls_ok: int = 0
    calls_failed: int = 0  # last attempt failed and no retry was allowed
    calls_unfinished: int = 0  # stopped (deadline or Ctrl-C) between attempts
    attempts: int = 0
    attempts_ok: int = 0
    attempts_failed: int = 0
    retries: int = 0  # attempts with resend_count > 0
    rate_limited: int = 0  # 429 answers
    errors_by_type: dict[str, int] = field(default_factory=dict)
    prompt_tokens: int = 0  # successful attempts' usage
    completion_tokens: int = 0
    ttft_sum_s: float = 0.0
    ttft_count: int = 0
    queue_wait_sum_s: float = 0.0
    spans_ended: int = 0
    spans_exported: int = 0  # the exporter returned SUCCESS for them
    spans_export_failed: int = 0
    elapsed_s: float = 0.0

    def count_error(self, error_type: str) -> None:
        self.errors_by_type[error_type] = self.errors_by_type.get(error_type, 0) + 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ShardCounters:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def fleet_totals(shards: list[ShardCounters]) -> ShardCounters:
    """Sum of the shards' counters; elapsed is the longest shard's."""
    total = ShardCounters()
    for shard in shards:
        for f in fields(ShardCounters):
            if f.name == "errors_by_type":
                for key, n in shard.errors_by_type.items():
                    total.errors_by_type[key] = total.errors_by_type.get(key, 0) + n
            elif f.name == "elapsed_s":
                total.elapsed_s = max(total.elapsed_s, shard.elapsed_s)
            else:
                setattr(total, f.name, getattr(total, f.name) + getattr(shard, f.name))
    return total


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def derived_figures(total: ShardCounters) -> dict[str, float | None]:
    """Rates and throughput; ``None`` where nothing was measured (never a made-up 0)."""
    tokens = total.prompt_tokens + total.completion_tokens
    per_min = 60.0 / total.elapsed_s if total.elapsed_s > 0 else None
    return {
        "tokens_per_minute_total": tokens * per_min if per_min else None,
        "tokens_per_minute_completion": total.completion_tokens * per_min if per_min else None,
        "spans_per_s": total.spans_ended * per_min / 60.0 if per_min else None,
        "attempt_success_rate": _share(total.attempts_ok, total.attempts),
        "call_success_rate": _share(total.calls_ok, total.calls_ok + total.calls_failed),
        "retry_share": _share(total.retries, total.attempts),
        "rate_limited_share": _share(total.rate_limited, total.attempts),
        "ttft_mean_s": total.ttft_sum_s / total.ttft_count if total.ttft_count else None,
        "queue_wait_mean_s": _share_f(total.queue_wait_sum_s, total.attempts),
    }


def _share_f(part: float, whole: int) -> float | None:
    return part / whole if whole else None
