"""Re-verification of a run whose shard rows are sparse (docs/metrics.md#minute-table):
a shard's missing minute and a stored empty row (sealed before rows were sparse) agree."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.analytics.proofs.verification import verify_run
from tpmledger.analytics.seal.run_computation import in_seal_view
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.storage.server.database import transaction

SECOND = 1_000_000_000
DAY = 86_400 * SECOND


@pytest.mark.slow
def test_a_sparse_run_verifies_and_so_does_an_empty_row_stored_the_old_way(
    database_url: str,
) -> None:
    store(
        database_url,
        [
            attempt_row(
                run_id="sparse-verify",
                shard_id=str(shard),
                start_ns=BASE_NS + day * DAY + shard * SECOND,
                end_ns=BASE_NS + day * DAY + shard * SECOND + SECOND,
            )
            for shard in range(2)
            for day in (0, 1)
        ],
    )
    seal_run(database_url, "sparse-verify")
    assert in_seal_view(database_url, verify_run, "sparse-verify").ok
    with transaction(database_url) as session:
        # What a seal before sparse rows stored for shard 0 in a quiet minute.
        session.execute(
            text(
                "INSERT INTO minute_metrics SELECT run_id, version, shard_id, "
                "minute_utc + interval '10 minutes', 0, 0, 0, 0, 0, 0, NULL, NULL, NULL, "
                "NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0.0, 0, NULL, NULL, "
                "concurrency_cap, 0 FROM minute_metrics "
                "WHERE run_id = 'sparse-verify' AND shard_id = '0' ORDER BY minute_utc LIMIT 1"
            )
        )
    assert in_seal_view(database_url, verify_run, "sparse-verify").ok
    with transaction(database_url) as session:  # a row that is not empty is still caught
        session.execute(
            text(
                "UPDATE minute_metrics SET calls_in_minute = 1 WHERE run_id = 'sparse-verify' "
                "AND shard_id = '0' AND minute_utc = (SELECT min(minute_utc) + interval "
                "'10 minutes' FROM minute_metrics WHERE run_id = 'sparse-verify')"
            )
        )
    assert not in_seal_view(database_url, verify_run, "sparse-verify").ok
