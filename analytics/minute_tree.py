"""The minute Merkle tree of SPEC §5 (RFC 6962 over the JCS of each minute leaf)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl
import rfc8785

from analytics.minute_leaves import MinuteDigests, leaves_from_minutes
from provenance.event_file import EventFile
from provenance.merkle import inclusion_proof, leaf_hash, root_from_leaf_hashes


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


def leaf_bytes(leaf: dict[str, Any]) -> bytes:
    """The leaf data that is hashed: the JCS of the leaf document."""
    return rfc8785.dumps(leaf)


def tree_from_leaves(leaves: list[dict[str, Any]]) -> MinuteTree:
    """The RFC 6962 tree over minute leaves in minute order."""
    hashes = [leaf_hash(leaf_bytes(leaf)) for leaf in leaves]
    return MinuteTree(leaves, hashes, root_from_leaf_hashes(hashes).hex())


def build_minute_tree(
    minutes: pl.DataFrame, file: EventFile, digests: MinuteDigests | None = None
) -> MinuteTree:
    """The tree over the whole-run rows of a minute table (with ``minute_ns``)."""
    return tree_from_leaves(leaves_from_minutes(minutes, file, digests))
