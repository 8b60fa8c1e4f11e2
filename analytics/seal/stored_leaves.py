"""A version's minute leaves, stored with it so its entry bundles are served from storage
(docs/provenance.md#tiles), never rebuilt from the run's attempts.

The seal stores the leaf bytes of the minutes whose leaf differs from what the versions
before it hold (storage/writers/minute_leaf_store.py), except minutes without attempts that no
earlier row covers: an empty minute's leaf is determined by its minute and whether the run
measures retries (``retries`` 0 or null), so it is rebuilt when served. Every served leaf
is checked against the leaf hashes the version sealed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy.orm import Session

from tpmledger.analytics.seal.minute_log import MINUTE
from tpmledger.provenance.merkle import leaf_hash
from tpmledger.provenance.minute_proofs import LEAF_FIGURES, leaf_bytes
from tpmledger.storage.codecs.time_text import minute_text
from tpmledger.storage.writers.minute_leaf_store import insert_minute_leaves, leaves_as_of

if TYPE_CHECKING:  # the serving side imports this module without the analytics engine
    from tpmledger.analytics.seal.minute_tree import MinuteTree

#: events_sha256 of a minute without event lines.
EMPTY_EVENTS_SHA256 = hashlib.sha256(b"").hexdigest()
#: ``retries`` of an empty minute: 0 when the run measures retries, null when it does not.
EMPTY_RETRIES: tuple[int | None, ...] = (0, None)


class StoredLeavesMismatch(ValueError):
    """Stored leaves do not hash to the leaf hashes the version sealed."""


def empty_leaf(minute_utc: str, retries: int | None) -> dict[str, Any]:
    """The leaf of a minute without attempts."""
    leaf: dict[str, Any] = {"minute_utc": minute_utc}
    leaf |= {name: 0 for name in LEAF_FIGURES}
    return leaf | {"retries": retries, "events_sha256": EMPTY_EVENTS_SHA256}


def is_empty(leaf: Mapping[str, Any]) -> bool:
    """Whether ``leaf`` is exactly the leaf :func:`empty_leaf` rebuilds for its minute."""
    retries = leaf.get("retries")
    if retries not in EMPTY_RETRIES or isinstance(retries, bool):
        return False
    return dict(leaf) == empty_leaf(str(leaf.get("minute_utc")), retries)


def leaf_minute(leaf: Mapping[str, Any]) -> datetime:
    """A leaf's minute as an aware UTC datetime."""
    return datetime.fromisoformat(str(leaf["minute_utc"]).replace("Z", "+00:00")).astimezone(UTC)


def leaves_to_store(
    tree: MinuteTree, previous: Mapping[datetime, bytes]
) -> list[tuple[datetime, bytes]]:
    """``(minute, leaf bytes)`` of the tree's minutes that reading ``previous`` (the stored
    leaves as the version before sees them) would not give: changed leaves, and new
    leaves of minutes with attempts."""
    if not tree.leaves:
        return []
    first = leaf_minute(tree.leaves[0])
    changed = []
    for i, (leaf, hashed) in enumerate(zip(tree.leaves, tree.leaf_hashes, strict=True)):
        minute = first + i * MINUTE
        before = previous.get(minute)
        if before is None and is_empty(leaf):
            continue
        if before is not None and leaf_hash(before) == hashed:
            continue
        changed.append((minute, leaf_bytes(leaf)))
    return changed


def store_version_leaves(session: Session, run_id: str, version: int, tree: MinuteTree) -> int:
    """Store the leaves of ``version`` (sealed in the caller's transaction) that the
    versions before it do not hold; returns how many rows were stored."""
    if not tree.leaves:
        return 0
    first = leaf_minute(tree.leaves[0])
    end = first + tree.tree_size * MINUTE
    previous = leaves_as_of(session, run_id, version - 1, first, end) if version > 1 else {}
    return insert_minute_leaves(session, run_id, version, leaves_to_store(tree, previous))


def first_leaf_minute(document: Mapping[str, Any], tree_size: int) -> datetime:
    """A sealed version's first minute, from its document's last minute and tree size."""
    through = document.get("minutes", {}).get("through_minute_utc")
    if not through or tree_size <= 0:
        raise StoredLeavesMismatch("the version's document names no last minute")
    return leaf_minute({"minute_utc": through}) - (tree_size - 1) * MINUTE


def leaves_from_storage(
    session: Session,
    run_id: str,
    version: int,
    start: datetime,
    hashes: Sequence[bytes],
) -> list[bytes]:
    """The leaf bytes of ``len(hashes)`` minutes of ``version`` from ``start``, read from
    storage (stored rows, and empty minutes rebuilt), each checked against its sealed hash."""
    stored = leaves_as_of(session, run_id, version, start, start + len(hashes) * MINUTE)
    entries = []
    for i, hashed in enumerate(hashes):
        minute = start + i * MINUTE
        entry = stored.get(minute)
        if entry is None:
            candidates = (leaf_bytes(empty_leaf(minute_text(minute), r)) for r in EMPTY_RETRIES)
            entry = next((c for c in candidates if leaf_hash(c) == hashed), None)
        if entry is None or leaf_hash(entry) != hashed:
            raise StoredLeavesMismatch(
                f"the stored leaf of minute {minute_text(minute)} of {run_id} version "
                f"{version} does not hash to the leaf hash it sealed"
            )
        entries.append(entry)
    return entries
