"""A deterministic simulated 8-shard run stored through the real bulk writer."""

from __future__ import annotations

import random
from typing import Any

import polars as pl

from tests.storage.builders import BASE_NS, MINUTE_NS, attempt_row
from tpmledger.provenance.event_schema import EVENT_SCHEMA
from tpmledger.storage.schema.attempt_columns import ATTEMPT_COPY_COLUMNS
from tpmledger.storage.server.database import raw_transaction
from tpmledger.storage.writers.bulk_writer import write_attempts

RUN_ID = "newgen_full_20260201_030151_sharded"
SHARDS = 8
MINUTES = 9
PEAK_MINUTE = 4  # minute index with extra traffic: 2026-02-01T03:48:00Z


def sharded_rows(seed: int = 7) -> list[tuple[Any, ...]]:
    """Attempts over 9 minutes and 8 shards, with 429 retries, TTFT and queue waits."""
    rng = random.Random(seed)
    rows: list[tuple[Any, ...]] = []
    for minute in range(MINUTES):
        for shard in range(SHARDS):
            calls = rng.randint(4, 9) + (12 if minute == PEAK_MINUTE else 0)
            for i in range(calls):
                call_id = f"call-{minute}-{shard}-{i}"
                end = BASE_NS + minute * MINUTE_NS + rng.randrange(2, 58) * 1_000_000_000
                start = end - rng.randrange(300, 4000) * 1_000_000
                if rng.random() < 0.12:
                    # A rate-limited first attempt, retried within the same minute.
                    rows.append(
                        _row(
                            rng,
                            call_id,
                            shard,
                            start - 900_000_000,
                            start - 800_000_000,
                            0,
                            ok=False,
                        )
                    )
                    rows.append(_row(rng, call_id, shard, start, end, 1, ok=True))
                else:
                    rows.append(_row(rng, call_id, shard, start, end, 0, ok=True))
    return rows


def _row(
    rng: random.Random, call_id: str, shard: int, start: int, end: int, resend: int, *, ok: bool
) -> tuple[Any, ...]:
    return attempt_row(
        run_id=RUN_ID,
        shard_id=str(shard),
        call_id=call_id,
        call_id_explicit=True,
        resend_count=resend,
        start_ns=start,
        end_ns=end,
        queue_wait_s=round(rng.uniform(0, 0.4), 3),
        ttft_s=round(rng.uniform(0.05, 0.6), 4) if ok and rng.random() < 0.9 else None,
        prompt_tokens=rng.randint(200, 2000) if ok else None,
        completion_tokens=rng.randint(50, 800) if ok else None,
        status="ok" if ok else "error",
        error_type=None if ok else "http_429",
        http_status=200 if ok else 429,
    )


def store_sharded_run(url: str, seed: int = 7) -> int:
    """Write the run; return how many attempts were stored."""
    with raw_transaction(url) as conn:
        return write_attempts(conn, sharded_rows(seed))


def sharded_events(seed: int = 7) -> pl.DataFrame:
    """The same run as canonical events, without a database (ids hex, as stored ones read)."""
    records = []
    for row in sharded_rows(seed):
        attempt = dict(zip(ATTEMPT_COPY_COLUMNS, row, strict=True))
        attempt["trace_id"] = attempt["trace_id"].hex()
        attempt["span_id"] = attempt["span_id"].hex()
        records.append({name: attempt[name] for name in EVENT_SCHEMA})
    return pl.DataFrame(records, schema=EVENT_SCHEMA)
