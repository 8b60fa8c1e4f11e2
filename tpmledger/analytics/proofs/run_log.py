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
minute leaf bytes, rebuilt from the version's events and checked against those hashes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from sqlalchemy import select

from tpmledger.analytics.proofs.run_events import load_run_events
from tpmledger.analytics.proofs.summary_export import (
    RunNotSealed,
    SnapshotOutdated,
    VersionNotSealed,
    head_checkpoint,
    version_end_ns,
)
from tpmledger.analytics.seal.minute_leaves import minute_leaves
from tpmledger.analytics.seal.minute_log import leaf_list
from tpmledger.provenance.merkle import leaf_hash
from tpmledger.provenance.minute_proofs import leaf_bytes
from tpmledger.provenance.signing_keys import SigningKey
from tpmledger.provenance.tiles import TileError, TileRef, bundle_for, level_hashes, tile_data
from tpmledger.storage.database import read_session, read_view
from tpmledger.storage.models import Snapshot
from tpmledger.storage.snapshots_read import snapshot_at


def version_checkpoint(
    url: str, run_id: str, key: SigningKey, log_origin: str, version: int | None = None
) -> str:
    """The signed checkpoint of ``version`` (default: the newest) of ``run_id``."""
    snapshot = _snapshot(url, run_id, version)
    return head_checkpoint(run_id, snapshot.tree_size, snapshot.merkle_root, key, log_origin)


def _snapshot(url: str, run_id: str, version: int | None) -> Snapshot:
    if version is None:
        query = (
            select(Snapshot)
            .where(Snapshot.run_id == run_id)
            .order_by(Snapshot.version.desc())
            .limit(1)
        )
        with read_session(url) as session:
            snapshot = session.scalars(query).first()
        if snapshot is None:
            raise RunNotSealed(run_id)
        return snapshot
    with read_view(url) as session:
        found = snapshot_at(session, run_id, version)
    if found is None:
        raise VersionNotSealed(run_id, version)
    return found


@dataclass(frozen=True)
class _Tree:
    version: int
    leaf_hashes: list[bytes]
    levels: dict[int, list[bytes]]
    entries: list[bytes] | None = None


class RunLogTiles:
    """Tiles of each run's newest sealed tree, the trees of a few runs kept in memory."""

    def __init__(self, url: str, keep: int = 8) -> None:
        self.url = url
        self.keep = keep
        self._trees: OrderedDict[tuple[str, str], _Tree] = OrderedDict()
        self._lock = threading.Lock()

    def tile(self, run_id: str, tile: TileRef) -> bytes:
        """The bytes of ``tile`` in the run's newest tree; ``TileError`` if it has none."""
        snapshot = _snapshot(self.url, run_id, None)
        tree = self._tree(snapshot)
        if tile.level is None:
            return bundle_for(self._entries(snapshot, tree), tile)
        return tile_data(self._level(tree, tile.level), tile)

    def _tree(self, snapshot: Snapshot) -> _Tree:
        key = (snapshot.run_id, snapshot.seal)
        with self._lock:
            if key in self._trees:
                self._trees.move_to_end(key)
                return self._trees[key]
        if snapshot.leaf_hashes is None:
            raise TileError(
                f"version {snapshot.version} of {snapshot.run_id} was sealed before leaf hashes "
                "were stored; seal it again (tpmledger analyze --force)"
            )
        hashes = leaf_list(snapshot.leaf_hashes)
        tree = _Tree(snapshot.version, hashes, {0: hashes})
        self._remember(key, tree)
        return tree

    def _remember(self, key: tuple[str, str], tree: _Tree) -> None:
        with self._lock:
            self._trees[key] = tree
            self._trees.move_to_end(key)
            while len(self._trees) > self.keep:
                self._trees.popitem(last=False)

    def _level(self, tree: _Tree, level: int) -> list[bytes]:
        with self._lock:
            for at in range(1, level + 1):
                if at not in tree.levels:
                    tree.levels[at] = level_hashes(tree.levels[at - 1], 1)
            return tree.levels[level]

    def _entries(self, snapshot: Snapshot, tree: _Tree) -> list[bytes]:
        if tree.entries is not None:
            return tree.entries
        entries = version_entries(self.url, snapshot)
        if [leaf_hash(e) for e in entries] != tree.leaf_hashes:
            raise SnapshotOutdated(
                f"the minute leaves of {snapshot.run_id} version {snapshot.version} rebuilt "
                "from its events do not hash to the leaf hashes it sealed"
            )
        self._remember((snapshot.run_id, snapshot.seal), _with_entries(tree, entries))
        return entries


def _with_entries(tree: _Tree, entries: list[bytes]) -> _Tree:
    return _Tree(tree.version, tree.leaf_hashes, tree.levels, entries)


def version_entries(url: str, snapshot: Snapshot) -> list[bytes]:
    """The minute leaf bytes of a sealed version, rebuilt from the events it saw."""
    events = load_run_events(
        url,
        snapshot.run_id,
        end_before_ns=version_end_ns(snapshot),
        received_by=snapshot.data_as_of,
    )
    return [leaf_bytes(leaf) for leaf in minute_leaves(events)]
