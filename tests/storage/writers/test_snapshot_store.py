"""A snapshot's minute rows are stored exactly (COPY on the session's own transaction)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import select

from tpmledger.storage.schema.minute_columns import MINUTE_COLUMNS
from tpmledger.storage.schema.models import MinuteMetric, Snapshot
from tpmledger.storage.server.database import transaction
from tpmledger.storage.writers.snapshot_store import insert_snapshot

MINUTE0 = datetime(2026, 2, 1, 3, 44, tzinfo=UTC)


def _snapshot(run_id: str) -> dict[str, Any]:
    return {
        "run_id": run_id,
        "version": 1,
        "computed_at": MINUTE0,
        "seal": f"seal-{run_id}",
        "previous_seal": None,
        "events_sha256": "0" * 64,
        "events_count": 3,
        "merkle_root": "1" * 64,
        "tree_size": 2,
        "metrics_sha256": "2" * 64,
        "document": {"run_id": run_id},
        "metrics": {"run_id": run_id},
        "data_as_of": MINUTE0,
    }


def _minute(shard: str, i: int, **values: Any) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(MINUTE_COLUMNS)
    row |= {
        "run_id": "r",
        "version": 1,
        "shard_id": shard,
        "minute_utc": MINUTE0 + timedelta(minutes=i),
    }
    row |= {
        "calls_in_minute": i,
        "prompt_tpm_in": 10 * i,
        "completion_tpm_out": 5,
        "tpm_total": 10 * i + 5,
    }
    row |= {"successes": i, "failures": 0, "in_flight_mean": 0.1 + i / 3, "in_flight_max": 2}
    row |= {"shards_active": 1}
    return row | values


def test_minute_rows_round_trip_exactly(database_url: str) -> None:
    rows = [
        _minute("*", 0, retries=None, ttft_p50_s=None, concurrency_cap=None),
        _minute("a", 1, retries=3, retry_rate=0.25, ttft_p50_s=1e-7, ttft_variance_s2=2.5e300),
        _minute("tab\tand\nnewline \\ ☃", 2, queue_depth_mean=float("inf")),
    ]
    with transaction(database_url) as session:
        insert_snapshot(session, _snapshot("r"), rows)
    with transaction(database_url) as session:
        stored = session.scalars(select(MinuteMetric).order_by(MinuteMetric.minute_utc)).all()
        assert session.scalar(select(Snapshot.seal)) == "seal-r"
        got = [{name: getattr(m, name) for name in rows[0]} for m in stored]
    assert got == rows


def test_a_failed_copy_rolls_the_snapshot_back(database_url: str) -> None:
    bad = _minute("*", 0, calls_in_minute="not a number")
    with pytest.raises(psycopg.errors.DataError), transaction(database_url) as session:
        insert_snapshot(session, _snapshot("r"), [bad])
    with transaction(database_url) as session:
        assert session.scalar(select(Snapshot.seal)) is None
