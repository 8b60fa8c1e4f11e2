"""The minute Merkle tree of SPEC §5 over the whole-run minute table and the event file.

One leaf per minute from the first to the last (empty minutes included); leaf data =
JCS of ``{minute_utc, calls_in_minute, prompt_tpm_in, completion_tpm_out, tpm_total,
failures, retries, events_sha256}`` where ``events_sha256`` hashes that minute's lines
of the canonical file (the lines are contiguous because the file is ordered by end time,
and a minute's line count is its ``calls_in_minute``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl
import rfc8785

from analytics.minute_table import WHOLE_RUN, minute_utc
from provenance.event_file import EventFile
from provenance.merkle import inclusion_proof, leaf_hash, root_from_leaf_hashes

LEAF_FIELDS = (
    "calls_in_minute",
    "prompt_tpm_in",
    "completion_tpm_out",
    "tpm_total",
    "failures",
    "retries",
)


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

    def proofs(self) -> list[dict[str, Any]]:
        """Inclusion proofs of every minute, in minute order."""
        return [self.proof(i) for i in range(self.tree_size)]


def leaf_bytes(leaf: dict[str, Any]) -> bytes:
    """The leaf data that is hashed: the JCS of the leaf document."""
    return rfc8785.dumps(leaf)


def build_minute_tree(minutes: pl.DataFrame, file: EventFile) -> MinuteTree:
    """The tree over the whole-run rows of a minute table (with ``minute_ns``)."""
    whole = minutes.filter(pl.col("shard_id") == WHOLE_RUN).sort("minute_ns")
    leaves: list[dict[str, Any]] = []
    line = 0
    for row in whole.select("minute_ns", *LEAF_FIELDS).iter_rows(named=True):
        count = int(row["calls_in_minute"])
        leaf = {"minute_utc": minute_utc(row["minute_ns"])}
        leaf |= {name: row[name] for name in LEAF_FIELDS}
        leaf["events_sha256"] = file.slice_sha256(line, line + count)
        leaves.append(leaf)
        line += count
    if line != file.count:
        raise ValueError(f"minute table covers {line} events but the file has {file.count}")
    hashes = [leaf_hash(leaf_bytes(leaf)) for leaf in leaves]
    return MinuteTree(leaves, hashes, root_from_leaf_hashes(hashes).hex())
