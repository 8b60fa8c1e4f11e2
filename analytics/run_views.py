"""The run object and minute series as the read API serves them (SPEC §8).

Sealed runs are served from their newest snapshot (no raw-span scan per request). A run
that has data but was never sealed yet is computed live, without sealing (``seal`` and
``snapshot_version`` are null), so a brand-new run is visible before the worker runs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from analytics.minute_table import with_minute_utc
from analytics.run_computation import compute_run
from storage.snapshots_read import latest_snapshot, minute_rows

# Keys of one element of GET /v1/runs/{run_id}/minutes, in SPEC §8 order.
API_MINUTE_KEYS: tuple[str, ...] = (
    "minute_utc",
    "calls_in_minute",
    "prompt_tpm_in",
    "completion_tpm_out",
    "tpm_total",
    "successes",
    "failures",
    "retries",
    "retry_rate",
    "success_rate",
    "ttft_p50_s",
    "ttft_p95_s",
    "ttft_p99_s",
    "in_flight_mean",
    "in_flight_max",
    "queue_depth_mean",
    "queue_depth_max",
    "shards_active",
)


def _utc(minute: datetime) -> str:
    return minute.strftime("%Y-%m-%dT%H:%M:%SZ")


def _api_minute(row: dict[str, Any]) -> dict[str, Any]:
    out = {key: row.get(key) for key in API_MINUTE_KEYS}
    out["minute_utc"] = _utc(row["minute_utc"])
    return out


def run_object(url: str, run_id: str) -> dict[str, Any]:
    """The §8 run object (plus extra keys); raises ``UnknownRun`` for an unknown run."""
    snapshot = latest_snapshot(url, run_id)
    if snapshot is not None:
        return dict(snapshot.metrics)
    computation = compute_run(url, run_id)
    return {**computation.metrics, "seal": None, "snapshot_version": None}


def minute_series(url: str, run_id: str, shard_id: str = "*") -> list[dict[str, Any]] | None:
    """Minutes of the whole run ('*') or one shard; None when that shard has no rows."""
    snapshot = latest_snapshot(url, run_id)
    if snapshot is not None:
        rows = minute_rows(url, run_id, snapshot.version, shard_id)
    else:
        table = with_minute_utc(compute_run(url, run_id).analysis.minutes)
        rows = [r for r in table.to_dicts() if r["shard_id"] == shard_id]
    if not rows:
        return None
    return [_api_minute(r) for r in rows]
