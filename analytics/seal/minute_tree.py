"""The minute Merkle tree of a sealed version (RFC 6962 over the JCS of each minute leaf).

The leaf, its bytes and the tree are defined once, in :mod:`provenance.minute_proofs` and
:mod:`provenance.merkle`; this module builds them from a minute table."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

from tpmledger.analytics.seal.minute_leaves import MinuteDigests, leaves_from_minutes
from tpmledger.provenance.event_file import EventFile, FileDigests
from tpmledger.provenance.merkle import inclusion_proof, root_from_leaf_hashes
from tpmledger.provenance.minute_proofs import minute_leaf_hashes


@dataclass(frozen=True)
class MinuteTree:
    """Leaves (as documents), their RFC 6962 hashes and the tree head."""

    leaves: list[dict[str, Any]]
    leaf_hashes: list[bytes]
    root: str  # hex

    @property
    def tree_size(self) -> int:
        return len(self.leaves)

    def proof(self, index: int) -> dict[str, Any]:
        """An inclusion proof of minute ``index``: what a verifier needs besides the root."""
        return {
            "index": index,
            "tree_size": self.tree_size,
            "leaf": self.leaves[index],
            "leaf_hash": self.leaf_hashes[index].hex(),
            "proof": [h.hex() for h in inclusion_proof(self.leaf_hashes, index)],
        }


def tree_from_leaves(leaves: list[dict[str, Any]]) -> MinuteTree:
    """The RFC 6962 tree over minute leaves in minute order."""
    hashes = minute_leaf_hashes(leaves)
    return MinuteTree(leaves, hashes, root_from_leaf_hashes(hashes).hex())


def build_minute_tree(
    minutes: pl.DataFrame, file: EventFile | FileDigests, digests: MinuteDigests | None = None
) -> MinuteTree:
    """The tree over the whole-run rows of a minute table (with ``minute_ns``)."""
    return tree_from_leaves(leaves_from_minutes(minutes, file, digests))
