"""Minute leaves stored with each version: only changed minutes with attempts, the empty
ones rebuilt, and every version's leaves read back from storage alone hash to its root
(docs/provenance.md#tiles)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text

from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, MINUTE_NS, attempt_row
from tpmledger.analytics.seal.minute_log import MINUTE, leaf_list
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.analytics.seal.stored_leaves import (
    StoredLeavesMismatch,
    empty_leaf,
    first_leaf_minute,
    is_empty,
    leaves_from_storage,
)
from tpmledger.provenance.merkle import leaf_hash, root_from_leaf_hashes
from tpmledger.provenance.minute_proofs import leaf_bytes
from tpmledger.storage.schema.models import Snapshot
from tpmledger.storage.server.database import raw_transaction, read_session

SECOND = 1_000_000_000
FIRST = datetime.fromtimestamp(BASE_NS // SECOND, UTC)


def _calls(minutes: list[int], second: int = 10, **fields: Any) -> list[tuple[Any, ...]]:
    return [
        attempt_row(
            run_id="gaps",
            start_ns=BASE_NS + m * MINUTE_NS + second * SECOND,
            end_ns=BASE_NS + m * MINUTE_NS + (second + 2) * SECOND,
            **fields,
        )
        for m in minutes
    ]


def _stored(url: str) -> list[tuple[int, datetime]]:
    with read_session(url) as session:
        rows = session.execute(
            text(
                "SELECT version, minute_utc FROM minute_leaves WHERE run_id = 'gaps' "
                "ORDER BY version, minute_utc"
            )
        )
        return [(int(v), m) for v, m in rows]


def _served(url: str, version: int) -> list[bytes]:
    """Every leaf of ``version`` read back from storage alone, as entry bundles are."""
    with read_session(url) as session:
        snapshot = session.get(Snapshot, ("gaps", version))
        assert snapshot is not None and snapshot.leaves_stored and snapshot.leaf_hashes
        first = first_leaf_minute(snapshot.document, snapshot.tree_size)
        hashes = leaf_list(snapshot.leaf_hashes)
        leaves = leaves_from_storage(session, "gaps", version, first, hashes)
        root = root_from_leaf_hashes([leaf_hash(e) for e in leaves])
        assert root.hex() == snapshot.merkle_root
        return leaves


@pytest.mark.slow
@pytest.mark.parametrize("measured", [False, True], ids=["retries-null", "retries-measured"])
def test_a_version_stores_only_changed_minutes_with_attempts(
    database_url: str, measured: bool
) -> None:
    fields = {"resend_count": 0, "call_id_explicit": True} if measured else {}
    store(database_url, _calls([0, 3], **fields))  # minutes 1 and 2 are empty
    v1 = seal_run(database_url, "gaps")
    assert v1.document["minutes"]["tree_size"] == 4
    assert _stored(database_url) == [(1, FIRST), (1, FIRST + 3 * MINUTE)]
    leaves = _served(database_url, 1)
    empty = empty_leaf("2026-02-01T03:45:00Z", 0 if measured else None)
    assert leaves[1] == leaf_bytes(empty)

    # v2 adds minutes 4 (empty) and 5: only minute 5 is stored.
    store(database_url, _calls([5], **fields))
    seal_run(database_url, "gaps")
    assert _stored(database_url)[2:] == [(2, FIRST + 5 * MINUTE)]
    assert _served(database_url, 2)[:4] == leaves

    # v3: late data in minute 3 and a new call in the empty minute 1.
    store(database_url, _calls([3, 1], second=30, **fields))
    seal_run(database_url, "gaps")
    assert _stored(database_url)[3:] == [(3, FIRST + MINUTE), (3, FIRST + 3 * MINUTE)]
    assert _served(database_url, 3)[0] == leaves[0]
    assert _served(database_url, 1) == leaves  # earlier versions read as they were sealed


def test_raw_attempts_are_not_needed_and_a_wrong_leaf_is_refused(database_url: str) -> None:
    store(database_url, _calls([0, 2]))
    seal_run(database_url, "gaps")
    leaves = _served(database_url, 1)
    with raw_transaction(database_url) as conn:
        conn.execute("DELETE FROM attempts WHERE run_id = 'gaps'")  # as prune does
    assert _served(database_url, 1) == leaves
    with read_session(database_url) as session:
        snapshot = session.get(Snapshot, ("gaps", 1))
        assert snapshot is not None and snapshot.leaf_hashes
        hashes = leaf_list(snapshot.leaf_hashes)
        with pytest.raises(StoredLeavesMismatch, match="03:45:00Z of gaps version 1"):
            leaves_from_storage(session, "gaps", 1, FIRST, [hashes[0], hashes[0]])


def test_an_empty_minute_is_recognized_exactly() -> None:
    empty = empty_leaf("2026-02-01T03:44:00Z", 0)
    assert is_empty(empty) and is_empty(empty | {"retries": None})
    assert not is_empty(empty | {"retries": 2})
    assert not is_empty(empty | {"retries": False})
    assert not is_empty(empty | {"failures": 1})
    assert not is_empty(empty | {"events_sha256": "00" * 32})
