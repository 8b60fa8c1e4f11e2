"""Minute rows read column-wise for the charts."""

from __future__ import annotations

import pytest

from tests.dashboard.builders import seed_sealed_run
from tpmledger.dashboard.data.minute_series import (
    load_run_minutes,
    load_shard_minutes,
    shard_sort_key,
)
from tpmledger.storage.server.database import in_one_snapshot


def test_whole_run_and_per_shard_minutes(database_url: str) -> None:
    seeded = seed_sealed_run(database_url, "run-a", shards=3, minutes=5)

    run = in_one_snapshot(database_url, load_run_minutes, "run-a", 1, ("tpm_total", "retry_rate"))
    assert run.minutes[0] == "2026-02-01 03:44" and len(run.minutes) == 5
    assert run.column("tpm_total") == [seeded.per_minute[m]["total"] for m in seeded.minutes]
    assert run.measured("retry_rate")

    shards = in_one_snapshot(database_url, load_shard_minutes, "run-a", 1, ("completion_tpm_out",))
    assert list(shards) == ["0", "1", "2"]
    columns = [s.column("completion_tpm_out") for s in shards.values()]
    per_minute = [sum(v) for v in zip(*columns, strict=True)]
    assert per_minute == [seeded.per_minute[m]["completion"] for m in seeded.minutes]


def test_unmeasured_columns_read_as_none(database_url: str) -> None:
    seed_sealed_run(database_url, "run-a", with_ttft=False, with_retries=False)
    run = in_one_snapshot(database_url, load_run_minutes, "run-a", 1, ("ttft_p95_s", "retry_rate"))
    assert not run.measured("ttft_p95_s") and not run.measured("retry_rate")


def test_only_real_columns_can_be_asked_for(database_url: str) -> None:
    with pytest.raises(ValueError, match="not minute_metrics columns"):
        in_one_snapshot(database_url, load_run_minutes, "run-a", 1, ("tpm_total; DROP TABLE runs",))


def test_shards_sort_numerically() -> None:
    assert sorted(["10", "2", "b", "0"], key=shard_sort_key) == ["0", "2", "10", "b"]
