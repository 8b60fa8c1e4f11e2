"""The Merkle tree head of RFC 6962 §2.1, written as the RFC defines it (recursively).

MTH({}) = SHA-256(), MTH({d0}) = SHA-256(0x00 ‖ d0), and for n > 1 leaves
MTH(D[n]) = SHA-256(0x01 ‖ MTH(D[0:k]) ‖ MTH(D[k:n])) with k the largest power of two
smaller than n. Kept apart from :mod:`provenance.merkle` (the sealer's bottom-up version
with proofs) so the verifier does not reuse the code it checks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def leaf_hash(data: bytes) -> bytes:
    """SHA-256(0x00 ‖ data)."""
    return hashlib.sha256(b"\x00" + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """SHA-256(0x01 ‖ left ‖ right)."""
    return hashlib.sha256(b"\x01" + left + right).digest()


def tree_head(leaf_hashes: Sequence[bytes]) -> bytes:
    """MTH over already-hashed leaves, in order."""
    n = len(leaf_hashes)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return leaf_hashes[0]
    k = 1 << ((n - 1).bit_length() - 1)  # largest power of two < n
    return node_hash(tree_head(leaf_hashes[:k]), tree_head(leaf_hashes[k:]))
