"""Builders that insert realistic sealed snapshots and minute rows straight into the tables.

They stand in for the analytics worker so the dashboard can be tested on known figures:
each returns what the pages should show (peaks, rates, shard count) computed here with the
docs/metrics.md definitions.
"""

from __future__ import annotations

import hashlib
import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from tpmledger.storage.schema.models import MinuteMetric, Run, Snapshot
from tpmledger.storage.server.database import transaction

START = datetime(2026, 2, 1, 3, 44, tzinfo=UTC)


def fake_digest(*parts: object) -> str:
    """A stable 64-hex stand-in for a digest or seal."""
    return hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()


def _rfc3339(dt: datetime) -> str:
    return dt.isoformat().replace("+00:00", "Z")


@dataclass
class SeededRun:
    """What was inserted and what the dashboard must show for it."""

    run_id: str
    shard_ids: list[str]
    minutes: list[datetime]
    metrics: dict[str, Any]
    seal: str
    # minute -> {"prompt": .., "completion": .., "total": ..} summed over shards
    per_minute: dict[datetime, dict[str, int]] = field(default_factory=dict)


def _shard_minute(shard: int, m: int, peak: int, completion_peak: int) -> tuple[int, int, int]:
    """(prompt, completion, calls) of one shard in one minute: a ramp with two spikes."""
    prompt, completion = 2_000 * (shard + 1) + 40 * m, 300 * (shard + 1) + 10 * m
    if m == peak:
        prompt, completion = prompt * 3, completion * 3
    if m == completion_peak:
        completion *= 5
    return prompt, completion, 10 + shard


def _minute_row(run_id: str, shard_id: str, minute: datetime, **values: Any) -> MinuteMetric:
    return MinuteMetric(run_id=run_id, version=1, shard_id=shard_id, minute_utc=minute, **values)


def seed_sealed_run(
    url: str,
    run_id: str = "run-sealed",
    *,
    shards: int = 4,
    minutes: int = 12,
    peak: int = 5,
    completion_peak: int = 8,
    live: bool = False,
    sweep_id: str | None = None,
    cap: int = 16,
    with_retries: bool = True,
    with_ttft: bool = True,
    overrides: dict[str, Any] | None = None,
) -> SeededRun:
    """A run sealed at version 1 with consistent run, snapshot and minute rows."""
    shard_ids = [str(s) for s in range(shards)]
    minute_list = [START + timedelta(minutes=m) for m in range(minutes)]
    rows: list[MinuteMetric] = []
    seeded = SeededRun(run_id, shard_ids, minute_list, {}, fake_digest(run_id, "seal"))
    totals = {"calls": 0, "ok": 0, "retries": 0, "prompt": 0, "completion": 0}
    shard_tokens = dict.fromkeys(shard_ids, 0)
    for m, minute in enumerate(minute_list):
        run_sum = {"prompt": 0, "completion": 0, "calls": 0}
        for s, shard_id in enumerate(shard_ids):
            prompt, completion, calls = _shard_minute(s, m, peak, completion_peak)
            run_sum["prompt"] += prompt
            run_sum["completion"] += completion
            run_sum["calls"] += calls
            shard_tokens[shard_id] += prompt + completion
            rows.append(
                _minute_row(
                    run_id,
                    shard_id,
                    minute,
                    calls_in_minute=calls,
                    prompt_tpm_in=prompt,
                    completion_tpm_out=completion,
                    tpm_total=prompt + completion,
                    successes=calls,
                    failures=0,
                    retries=0 if with_retries else None,
                    shards_active=1,
                    concurrency_cap=cap,
                )
            )
        calls = run_sum["calls"]
        failures = 1 if m % 3 == 0 else 0
        retries = (1 if m % 4 == 0 else 0) if with_retries else None
        ttft = 0.2 + 0.01 * m if with_ttft else None
        rows.append(
            _minute_row(
                run_id,
                "*",
                minute,
                calls_in_minute=calls,
                prompt_tpm_in=run_sum["prompt"],
                completion_tpm_out=run_sum["completion"],
                tpm_total=run_sum["prompt"] + run_sum["completion"],
                successes=calls - failures,
                failures=failures,
                retries=retries,
                retry_rate=retries / calls if retries is not None else None,
                success_rate=(calls - failures) / calls,
                ttft_p50_s=ttft,
                ttft_p95_s=ttft * 2 if ttft else None,
                ttft_p99_s=ttft * 3 if ttft else None,
                in_flight_mean=10.0 + m % 5,
                in_flight_max=14 + m % 5,
                queue_depth_mean=1.5 if m % 2 else 0.0,
                queue_depth_max=4 if m % 2 else 0,
                concurrency_cap=cap * shards,
                shards_active=shards,
            )
        )
        seeded.per_minute[minute] = {
            "prompt": run_sum["prompt"],
            "completion": run_sum["completion"],
            "total": run_sum["prompt"] + run_sum["completion"],
        }
        totals["calls"] += calls
        totals["ok"] += calls - failures
        totals["retries"] += retries or 0
        totals["prompt"] += run_sum["prompt"]
        totals["completion"] += run_sum["completion"]
    seeded.metrics = _metrics(seeded, totals, shard_tokens, cap, sweep_id, with_retries, with_ttft)
    seeded.metrics.update(overrides or {})
    _insert(url, seeded, rows, live=live, sweep_id=sweep_id, cap=cap, attempts=totals["calls"])
    return seeded


def _peak(seeded: SeededRun, key: str) -> dict[str, Any]:
    # docs/metrics.md: ties go to the earliest minute (max() keeps the first maximum).
    minute = max(seeded.minutes, key=lambda mm: seeded.per_minute[mm][key])
    figures = seeded.per_minute[minute]
    return {
        "minute_utc": _rfc3339(minute),
        "shard_count": len(seeded.shard_ids),
        "calls_in_minute": None,
        "completion_tpm_out": figures["completion"],
        "prompt_tpm_in": figures["prompt"],
        "tpm_total": figures["total"],
    }


def _metrics(
    seeded: SeededRun,
    totals: dict[str, int],
    shard_tokens: dict[str, int],
    cap: int,
    sweep_id: str | None,
    with_retries: bool,
    with_ttft: bool,
) -> dict[str, Any]:
    inner = [seeded.per_minute[m]["total"] for m in seeded.minutes[1:-1]]
    all_tokens = sum(shard_tokens.values())
    shares = {s: t / all_tokens for s, t in shard_tokens.items()}
    return {
        "run_id": seeded.run_id,
        "attempts": totals["calls"],
        "logical_calls": totals["calls"],
        "shard_count": len(seeded.shard_ids),
        "declared_shard_count": len(seeded.shard_ids),
        "first_event_utc": _rfc3339(seeded.minutes[0]),
        "last_event_utc": _rfc3339(seeded.minutes[-1] + timedelta(seconds=59)),
        "active_minutes": len(seeded.minutes),
        "peak_minute": _peak(seeded, "total"),
        "peak_completion_minute": _peak(seeded, "completion"),
        "sustained_tpm_total": statistics.median(inner) if inner else None,
        "attempt_success_rate": totals["ok"] / totals["calls"],
        "call_success_rate": totals["ok"] / totals["calls"],
        "retry_rate": totals["retries"] / totals["calls"] if with_retries else None,
        "retry_causes": {"http_429": totals["retries"]} if with_retries else {},
        "ttft_s": {"p50": 0.25, "p95": 0.5, "p99": 0.75, "mean": 0.3, "variance": 0.01}
        if with_ttft
        else {"p50": None, "p95": None, "p99": None, "mean": None, "variance": None},
        "shard_balance": {"shares": shares, "imbalance": max(shares.values()) * len(shares)},
        "events_sha256": fake_digest(seeded.run_id, "events"),
        "seal": seeded.seal,
        "snapshot_version": 1,
        "concurrency_cap": cap,
        "sweep_id": sweep_id,
        "work_conserving": {
            "sag_share": 0.03,
            "seconds_with_queue": 240,
            "passes": True,
            "threshold": 0.05,
        },
        "tokens": {
            "prompt": totals["prompt"],
            "completion": totals["completion"],
            "total": totals["prompt"] + totals["completion"],
        },
    }


def epoch_ns(dt: datetime) -> int:
    """Whole seconds of ``dt`` as nanoseconds since the epoch."""
    return int(dt.timestamp()) * 1_000_000_000


def _insert(
    url: str,
    seeded: SeededRun,
    rows: list[MinuteMetric],
    *,
    live: bool,
    sweep_id: str | None,
    cap: int,
    attempts: int,
) -> None:
    now = datetime.now(UTC)
    updated = now if live else now - timedelta(hours=1)
    sealed_at = updated - timedelta(seconds=30) if live else updated
    with transaction(url) as session:
        session.add(
            Run(
                run_id=seeded.run_id,
                first_event_ns=epoch_ns(seeded.minutes[0]),
                last_event_ns=epoch_ns(seeded.minutes[-1]) + 59 * 1_000_000_000,
                shard_ids=seeded.shard_ids,
                declared_shard_count=len(seeded.shard_ids),
                concurrency_cap=cap,
                sweep_id=sweep_id,
                attempts=attempts,
                updated_at=updated,
            )
        )
        session.add(
            Snapshot(
                run_id=seeded.run_id,
                version=1,
                computed_at=sealed_at,
                seal=seeded.seal,
                previous_seal=None,
                events_sha256=seeded.metrics["events_sha256"],
                events_count=attempts,
                merkle_root=fake_digest(seeded.run_id, "merkle"),
                tree_size=len(seeded.minutes),
                metrics_sha256=fake_digest(seeded.run_id, "metrics"),
                document={"run_id": seeded.run_id, "version": 1},
                metrics=seeded.metrics,
                data_as_of=sealed_at,
            )
        )
        session.add_all(rows)
