"""Used versus quota per target and minute: the sealed part stored, the tail aggregated."""

from __future__ import annotations

import json
from typing import Any

from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, MINUTE_NS, attempt_row
from tpmledger.analytics.kernels.quota_headroom import headroom_tokens
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.storage.readers.target_minutes import fetch_target_minutes, target_minutes
from tpmledger.storage.server.database import raw_transaction, read_view

SECOND = 1_000_000_000


def _rows(minutes: range, model: str = "gpt-test") -> list[tuple[Any, ...]]:
    rows = []
    for m in minutes:
        for i in range(4):
            end = BASE_NS + m * MINUTE_NS + (10 + i) * SECOND
            limited = i == 3
            rows.append(
                attempt_row(
                    run_id="tm",
                    model=model,
                    start_ns=end - SECOND,
                    end_ns=end,
                    status="error" if limited else "ok",
                    http_status=429 if limited else 200,
                    error_type="rate_limit_exceeded" if limited else None,
                    prompt_tokens=None if limited else 100,
                    completion_tokens=None if limited else 20 * (i + 1),
                    ratelimit_limit_tokens=1000.0 + i,  # the newest (latest end) wins
                    quota_tpm_declared=900.0 if model == "declared" and i == 0 else None,
                    ratelimit_remaining_tokens=500.0 - 100 * i,
                    span_attributes=json.dumps({"gen_ai.operation.name": "chat"}),
                )
            )
    return rows


def _everything(url: str) -> list[Any]:
    with raw_transaction(url) as conn:
        return fetch_target_minutes(conn, ["tm"])


def test_sealed_target_minutes_plus_the_tail_equal_a_full_aggregate(database_url: str) -> None:
    store(database_url, _rows(range(3)) + _rows(range(3), model="declared"))
    seal_run(database_url, "tm")
    store(database_url, _rows(range(3, 5)) + _rows(range(3, 5), model="declared"))
    with read_view(database_url) as session:
        read = target_minutes(session, ["tm"])
    assert read == _everything(database_url)
    assert len(read) == 10
    first = read[5]  # model "declared" sorts first; then gpt-test minute 0
    assert (first.model, first.minute_ns) == ("gpt-test", BASE_NS)
    assert (first.used_tpm, first.used_rpm, first.rate_limited) == (3 * 100 + 20 + 40 + 60, 4, 1)
    assert (first.quota_tpm, first.min_remaining_tokens) == (1003.0, 200.0)
    assert headroom_tokens(first) == 1 - 420 / 1003  # analytics' rule over storage's rows
    declared = read[0]
    assert (declared.model, declared.quota_tpm) == ("declared", 900.0)  # declared wins


def test_rollups_are_counted_once(database_url: str) -> None:
    """A framework span around an instrumented client span reports the same tokens: only
    the innermost counts, and a minute where only the rollup ended is not listed."""
    trace = bytes(range(16))
    parent, child = b"\x01" * 8, b"\x02" * 8
    rows = [
        attempt_row(
            run_id="tm", trace_id=trace, span_id=parent, model="framework",
            start_ns=BASE_NS, end_ns=BASE_NS + MINUTE_NS + SECOND,
        ),
        attempt_row(
            run_id="tm", trace_id=trace, span_id=child, parent_span_id=parent,
            start_ns=BASE_NS + SECOND, end_ns=BASE_NS + 30 * SECOND, ratelimit_limit_tokens=10.0,
        ),
    ]  # fmt: skip
    store(database_url, rows)
    [only] = _everything(database_url)
    assert (only.model, only.used_rpm, only.used_tpm, only.quota_tpm) == ("gpt-test", 1, 150, 10.0)


def test_a_sealed_minute_that_late_attempts_changed_is_as_fresh_as_the_minute_table(
    database_url: str,
) -> None:
    """Issue 37: a checkpoint sealed a minute while it was still filling; the minute table
    showed the late attempts from its live rows, /targets kept the checkpoint's counts."""
    from tpmledger.analytics.live.live_updater import LiveUpdater
    from tpmledger.analytics.views.current_table import current_table
    from tpmledger.storage.schema.minute_keys import WHOLE_RUN

    updater = LiveUpdater(database_url)
    store(database_url, _rows(range(3)))
    updater.update_once()
    seal_run(database_url, "tm", end_before_ns=BASE_NS + 2 * MINUTE_NS)  # minutes 0 and 1
    store(database_url, _rows(range(1, 2)))  # four more ending in the sealed minute 1
    updater.update_once()
    with read_view(database_url) as session:
        read = target_minutes(session, ["tm"])
        table = current_table(session, "tm")
        assert table is not None
        calls = {r["minute_utc"]: r["calls_in_minute"] for r in table.shard_rows(WHOLE_RUN)}
    by_minute = {t.minute_ns: t for t in read}
    assert by_minute[BASE_NS + MINUTE_NS].used_rpm == 8  # not the checkpoint's 4
    assert read == _everything(database_url)
    assert [t.used_rpm for t in read] == list(calls.values())
