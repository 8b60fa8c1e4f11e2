"""GET /v1/runs/{id}/minutes of a sealed run reads one shard's sealed rows, and answers
exactly what the merged current table answers."""

from __future__ import annotations

import pytest

from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.analytics.views.current_table import current_table
from tpmledger.analytics.views.minute_window import UnknownShard, minutes_view
from tpmledger.analytics.views.run_views import _api_minute
from tpmledger.storage.server.database import read_session

SECOND = 1_000_000_000
MINUTE = 60 * SECOND


@pytest.mark.slow
@pytest.mark.parametrize("measured", [False, True])
def test_sealed_rows_read_alone_equal_the_merged_table(database_url: str, measured: bool) -> None:
    run = f"sealed-minutes-{measured}"
    rows = [
        attempt_row(
            run_id=run,
            shard_id=str(i % 3),
            concurrency_cap=4 + i % 3,
            start_ns=BASE_NS + i * 7 * MINUTE,
            end_ns=BASE_NS + i * 7 * MINUTE + 90 * SECOND,  # spans a minute boundary
            queue_wait_s=0.5 if i % 3 == 1 else None,  # one shard reports queue waits
            resend_count=(i % 2) if measured else None,
            status="error" if i % 4 == 0 else "ok",
        )
        for i in range(9)
    ]
    store(database_url, rows)
    seal_run(database_url, run)
    with read_session(database_url) as session:
        table = current_table(session, run)
        assert table is not None
        for shard in ["*", "0", "1", "2"]:
            fast = minutes_view(session, run, shard)
            assert fast is not None
            assert [_api_minute(r) for r in fast] == [
                _api_minute(r) for r in table.shard_rows(shard)
            ], shard
        assert table.shard_rows("9") == []
        with pytest.raises(UnknownShard):
            minutes_view(session, run, "9")
        assert minutes_view(session, "nope") is None
