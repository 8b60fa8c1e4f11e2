"""A run's minute tree published as a C2SP log: checkpoints of any sealed version and the
tiles of the newest one (docs/provenance.md#checkpoints, #tiles).

Tiles address the run's newest sealed tree, as ``tlog-tiles`` tiles address a log's
latest tree: a full tile, or a partial tile of width ``W``, spans leaves that a later
version holds unchanged while the log only grows, so its bytes never change and it is
served for any width up to what the newest tree holds (the partial tiles of every earlier
checkpoint included). The one exception is a rebase after late data: that version does
not extend the earlier ones, its tiles differ from those served before, and witnesses
refuse its checkpoint (docs/provenance.md#witnessing).

Hash tiles come from the leaf hashes stored with each version; entry bundles hold the
minute leaf bytes stored with it (analytics/seal/stored_leaves.py), read one tile's 256
minutes at a time and checked against those hashes: serving a bundle never reads the run's
attempts, so it costs the same for any run size and keeps working after ``prune``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from tpmledger.analytics.proofs.version_heads import (
    RunNotSealed,
    SnapshotOutdated,
    VersionNotSealed,
    head_checkpoint,
)
from tpmledger.analytics.seal.minute_log import HASH_BYTES, MINUTE, leaf_list
from tpmledger.analytics.seal.stored_leaves import (
    StoredLeavesMismatch,
    first_leaf_minute,
    leaves_from_storage,
)
from tpmledger.provenance.signing_keys import SigningKey
from tpmledger.provenance.tiles import (
    TILE_WIDTH,
    TileError,
    TileRef,
    entry_bundle,
    level_hashes,
    tile_data,
)
from tpmledger.storage.readers.runs_read import run_is_known
from tpmledger.storage.readers.snapshots_read import snapshot_at
from tpmledger.storage.schema.models import Snapshot


def version_checkpoint(
    session: Session, run_id: str, key: SigningKey, log_origin: str, version: int | None = None
) -> str:
    """The signed checkpoint of ``version`` (default: the newest) of ``run_id``."""
    snapshot = _snapshot(session, run_id, version)
    return head_checkpoint(run_id, snapshot.tree_size, snapshot.merkle_root, key, log_origin)


def _snapshot(session: Session, run_id: str, version: int | None) -> Snapshot:
    if version is None:
        query = (
            select(Snapshot)
            .where(Snapshot.run_id == run_id)
            .order_by(Snapshot.version.desc())
            .limit(1)
        )
        snapshot = session.scalars(query).first()
        if snapshot is None:
            raise RunNotSealed(run_id, known=run_is_known(session, run_id))
        return snapshot
    found = snapshot_at(session, run_id, version)
    if found is None:
        raise VersionNotSealed(run_id, version)
    return found


@dataclass(frozen=True)
class _Tree:
    version: int
    leaf_hashes: list[bytes]
    levels: dict[int, list[bytes]]


class RunLogTiles:
    """Tiles of each run's newest sealed tree, the hash levels of a few trees kept in memory."""

    def __init__(self, keep: int = 8) -> None:
        self.keep = keep
        self._trees: OrderedDict[tuple[str, str], _Tree] = OrderedDict()
        self._lock = threading.Lock()

    def tile(self, session: Session, run_id: str, tile: TileRef) -> bytes:
        """The bytes of ``tile`` in the run's newest tree, as ``session`` sees it;
        ``TileError`` if it has none."""
        snapshot = _snapshot(session, run_id, None)
        if tile.level is None:
            return version_bundle(session, snapshot, tile)
        tree = self._tree(snapshot)
        return tile_data(self._level(tree, tile.level), tile)

    def _tree(self, snapshot: Snapshot) -> _Tree:
        key = (snapshot.run_id, snapshot.seal)
        with self._lock:
            if key in self._trees:
                self._trees.move_to_end(key)
                return self._trees[key]
        hashes = leaf_list(_leaf_hashes(snapshot))
        tree = _Tree(snapshot.version, hashes, {0: hashes})
        with self._lock:
            self._trees[key] = tree
            self._trees.move_to_end(key)
            while len(self._trees) > self.keep:
                self._trees.popitem(last=False)
        return tree

    def _level(self, tree: _Tree, level: int) -> list[bytes]:
        with self._lock:
            for at in range(1, level + 1):
                if at not in tree.levels:
                    tree.levels[at] = level_hashes(tree.levels[at - 1], 1)
            return tree.levels[level]


def _leaf_hashes(snapshot: Snapshot) -> bytes:
    if snapshot.leaf_hashes is None:
        raise TileError(
            f"version {snapshot.version} of {snapshot.run_id} was sealed before leaf hashes "
            "were stored; seal it again (tpmledger analyze --force)"
        )
    return snapshot.leaf_hashes


def version_bundle(session: Session, snapshot: Snapshot, tile: TileRef) -> bytes:
    """The entry bundle ``tile`` of a sealed version, from the leaves stored with it: one
    read bounded to the tile's minutes, each leaf checked against the sealed leaf hash."""
    start = tile.index * TILE_WIDTH
    if start + tile.width > snapshot.tree_size:
        raise TileError(f"{tile.path} is beyond the tree ({snapshot.tree_size} entries)")
    blob = _leaf_hashes(snapshot)
    if not snapshot.leaves_stored:
        raise SnapshotOutdated(
            f"version {snapshot.version} of {snapshot.run_id} was sealed before minute leaves "
            f"were stored with each version; seal it again (tpmledger analyze "
            f"{snapshot.run_id} --force) to serve its entry bundles"
        )
    hashes = leaf_list(blob[start * HASH_BYTES : (start + tile.width) * HASH_BYTES])
    try:
        first = first_leaf_minute(snapshot.document, snapshot.tree_size) + start * MINUTE
        entries = leaves_from_storage(session, snapshot.run_id, snapshot.version, first, hashes)
    except StoredLeavesMismatch as exc:
        raise SnapshotOutdated(str(exc)) from exc
    return entry_bundle(entries)
