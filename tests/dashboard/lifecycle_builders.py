"""Builders for a run's life beyond one sealed version: not sealed yet, resealed, in a sweep."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from tests.dashboard.builders import START, SeededRun, epoch_ns, fake_digest, seed_sealed_run
from tpmledger.storage.schema.models import MinuteMetric, Run, Snapshot
from tpmledger.storage.server.database import transaction


def seed_unsealed_run(url: str, run_id: str = "run-unsealed", attempts: int = 42) -> None:
    """A run ingest has seen but analytics has not sealed yet."""
    with transaction(url) as session:
        session.add(
            Run(
                run_id=run_id,
                first_event_ns=epoch_ns(START),
                last_event_ns=epoch_ns(START) + 10**9,
                shard_ids=["0"],
                declared_shard_count=None,
                concurrency_cap=None,
                sweep_id=None,
                attempts=attempts,
            )
        )


def seed_sweep(
    url: str,
    sweep_id: str,
    caps: list[int],
    tpm: list[float],
    retry: list[float],
) -> list[SeededRun]:
    """One sealed run per cap with the given sustained total TPM and retry rate."""
    return [
        seed_sealed_run(
            url,
            f"{sweep_id}-cap{cap}",
            shards=2,
            minutes=4,
            peak=1,
            completion_peak=2,
            sweep_id=sweep_id,
            cap=cap,
            overrides={"sustained_tpm_total": sustained, "retry_rate": retry_rate},
        )
        for cap, sustained, retry_rate in zip(caps, tpm, retry, strict=True)
    ]


def reseal(url: str, run: SeededRun, *, peak_total: int, sealed: bool = True) -> None:
    """Version 2 of a run's snapshot (new peak figure), as analytics writes after new data.

    With ``sealed`` the run's ``updated_at`` moves before the new snapshot, so the run
    reads as sealed (no data since, none in the last two minutes).
    """
    now = datetime.now(UTC)
    metrics = {**run.metrics, "snapshot_version": 2}
    metrics["peak_minute"] = {**run.metrics["peak_minute"], "tpm_total": peak_total}
    with transaction(url) as session:
        session.add(
            Snapshot(
                run_id=run.run_id,
                version=2,
                computed_at=now,
                seal=fake_digest(run.run_id, "seal", 2),
                previous_seal=run.seal,
                events_sha256=metrics["events_sha256"],
                events_count=metrics["attempts"],
                merkle_root=fake_digest(run.run_id, "merkle", 2),
                tree_size=len(run.minutes),
                metrics_sha256=fake_digest(run.run_id, "metrics", 2),
                document={"run_id": run.run_id, "version": 2},
                metrics=metrics,
                data_as_of=now,
            )
        )
        session.flush()
        rest = ", ".join(
            c.name
            for c in MinuteMetric.__table__.columns
            if c.name not in ("run_id", "version", "shard_id", "minute_utc")
        )
        session.execute(
            text(
                f"INSERT INTO minute_metrics (run_id, version, shard_id, minute_utc, {rest}) "
                f"SELECT run_id, 2, shard_id, minute_utc, {rest} FROM minute_metrics "
                "WHERE run_id = :run_id AND version = 1"
            ),
            {"run_id": run.run_id},
        )
        if sealed:
            session.execute(
                text("UPDATE runs SET updated_at = :t WHERE run_id = :run_id"),
                {"t": now - timedelta(hours=1), "run_id": run.run_id},
            )
    run.metrics, run.seal = metrics, fake_digest(run.run_id, "seal", 2)
