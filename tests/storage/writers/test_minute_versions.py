"""A version stores only the minute rows that changed; reading a version gives all of them."""

from __future__ import annotations

from sqlalchemy import text

from tests.analytics.proofs.test_version_consistency import _calls
from tests.analytics.seeding import store
from tpmledger.analytics.proofs.verification import verify_run
from tpmledger.analytics.seal.run_computation import compute_run, in_seal_view
from tpmledger.analytics.seal.sealing import minute_records, seal_run
from tpmledger.storage.readers.snapshots_read import minute_rows
from tpmledger.storage.server.database import in_one_snapshot, read_session
from tpmledger.storage.writers.minute_versions import MINUTE_ROW_COLUMNS, changed_rows


def _stored(url: str, version: int) -> int:
    with read_session(url) as session:
        query = text("SELECT count(*) FROM minute_metrics WHERE run_id = 'grow' AND version = :v")
        return int(session.execute(query, {"v": version}).scalar_one())


def _recomputed(url: str) -> list[dict[str, object]]:
    computation = compute_run(url, "grow")
    records = minute_records(computation.analysis.minutes, "grow", 0)
    return sorted(
        ({c: r[c] for c in MINUTE_ROW_COLUMNS} for r in records),
        key=lambda r: (r["shard_id"], r["minute_utc"]),
    )


def test_a_version_stores_what_changed_and_reads_whole(database_url: str) -> None:
    store(database_url, _calls(range(3)))
    seal_run(database_url, "grow")
    first = _stored(database_url, 1)
    store(database_url, _calls(range(3, 5)))
    seal_run(database_url, "grow")
    # Minutes 03:44-03:46 did not change: version 2 stores the two new minutes' rows.
    assert 0 < _stored(database_url, 2) < first + _stored(database_url, 2)
    assert _stored(database_url, 2) == 2 * first // 3
    assert in_one_snapshot(database_url, minute_rows, "grow", 2, shard_id=None) == _recomputed(
        database_url
    )
    assert len(in_one_snapshot(database_url, minute_rows, "grow", 1, shard_id=None)) == first
    # The re-verification compares every stored row of the newest version with a fresh one.
    assert in_seal_view(database_url, verify_run, "grow").ok


def test_changed_rows_keeps_new_and_different_rows_only() -> None:
    base = dict.fromkeys(MINUTE_ROW_COLUMNS, 0) | {"shard_id": "*", "minute_utc": 1}
    same, moved = dict(base), {**base, "tpm_total": 5}
    new = {**base, "minute_utc": 2}
    assert changed_rows([base], [same, new]) == [new]
    assert changed_rows([base], [moved]) == [moved]
