"""RFC 6962 Merkle tree hashing, inclusion proofs and their verification (docs/provenance.md).

Leaf hash = SHA-256(0x00 || data), node hash = SHA-256(0x01 || left || right), a tree of
n > 1 leaves splits at k = the largest power of two smaller than n, and the empty tree's
root is SHA-256 of the empty string (RFC 6962 §2.1). Verification follows RFC 9162
§2.1.3.2, which needs only the leaf hash, its index, the tree size, the path and the root;
consistency proofs between two tree sizes follow RFC 9162 §2.1.4.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(data: bytes) -> bytes:
    """RFC 6962 hash of one leaf's data."""
    return hashlib.sha256(LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """RFC 6962 hash of an interior node."""
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


def split_point(n: int) -> int:
    """The largest power of two strictly smaller than ``n`` (n >= 2)."""
    if n < 2:
        raise ValueError("a split needs at least two leaves")
    return 1 << ((n - 1).bit_length() - 1)


def root_from_leaf_hashes(hashes: Sequence[bytes]) -> bytes:
    """The Merkle tree head over already-hashed leaves (MTH of RFC 6962 §2.1)."""
    if not hashes:
        return EMPTY_ROOT
    # Bottom-up: pairing left to right and carrying an odd last node up unchanged
    # builds exactly the largest-power-of-two split tree of RFC 6962.
    level = list(hashes)
    while len(level) > 1:
        paired = [node_hash(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            paired.append(level[-1])
        level = paired
    return level[0]


def merkle_root(leaves: Sequence[bytes]) -> bytes:
    """The Merkle tree head over raw leaf data."""
    return root_from_leaf_hashes([leaf_hash(d) for d in leaves])


def inclusion_proof(hashes: Sequence[bytes], index: int) -> list[bytes]:
    """The audit path (PATH of RFC 6962 §2.1.1) for leaf ``index`` over leaf hashes."""
    if not 0 <= index < len(hashes):
        raise IndexError(f"leaf {index} is outside a tree of {len(hashes)} leaves")
    path: list[bytes] = []
    lo, hi = 0, len(hashes)
    # Walk down from the root, remembering the sibling subtree at each level.
    siblings: list[tuple[int, int]] = []
    while hi - lo > 1:
        k = split_point(hi - lo)
        if index < lo + k:
            siblings.append((lo + k, hi))
            hi = lo + k
        else:
            siblings.append((lo, lo + k))
            lo = lo + k
    for start, end in reversed(siblings):
        path.append(root_from_leaf_hashes(hashes[start:end]))
    return path


def all_inclusion_proofs(hashes: Sequence[bytes]) -> tuple[bytes, list[list[bytes]]]:
    """The root and every leaf's audit path, from one pass over the tree.

    Equal to ``[inclusion_proof(hashes, i) for i in range(n)]``, which rebuilds sibling
    subtrees for every leaf (quadratic in the leaves); here each subtree is hashed once
    and its hash appended to the paths of the leaves on its other side: O(n log n).
    """
    paths: list[list[bytes]] = [[] for _ in hashes]
    if not hashes:
        return EMPTY_ROOT, paths

    def subtree(lo: int, hi: int) -> bytes:
        if hi - lo == 1:
            return hashes[lo]
        k = lo + split_point(hi - lo)
        left, right = subtree(lo, k), subtree(k, hi)
        # Deeper siblings were appended first: each path runs from the leaf up.
        for i in range(lo, k):
            paths[i].append(right)
        for i in range(k, hi):
            paths[i].append(left)
        return node_hash(left, right)

    return subtree(0, len(hashes)), paths


def root_from_inclusion_proof(
    index: int, tree_size: int, leaf: bytes, proof: Sequence[bytes]
) -> bytes:
    """The root implied by a leaf hash and its audit path (RFC 9162 §2.1.3.2)."""
    if not 0 <= index < tree_size:
        raise ValueError(f"leaf index {index} is outside a tree of size {tree_size}")
    fn, sn = index, tree_size - 1
    result = leaf
    for sibling in proof:
        if len(sibling) != 32:
            raise ValueError("proof element is not a SHA-256 digest")
        if sn == 0:
            raise ValueError("proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            result = node_hash(sibling, result)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            result = node_hash(result, sibling)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ValueError("proof is shorter than the tree is deep")
    return result


def verify_inclusion(
    index: int, tree_size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> bool:
    """True when ``leaf`` (a leaf hash) is at ``index`` of the tree with head ``root``."""
    if len(leaf) != 32 or len(root) != 32:
        return False
    try:
        return root_from_inclusion_proof(index, tree_size, leaf, proof) == root
    except ValueError:
        return False


def consistency_proof(hashes: Sequence[bytes], old_size: int) -> list[bytes]:
    """PROOF(m, D[n]) of RFC 9162 §2.1.4.1: the tree of the first ``old_size`` leaf
    hashes is a prefix of the tree over all of ``hashes``."""
    if not 0 < old_size <= len(hashes):
        raise ValueError(f"old size {old_size} is not in 1..{len(hashes)}")

    def subproof(m: int, leaves: Sequence[bytes], complete: bool) -> list[bytes]:
        n = len(leaves)
        if m == n:
            return [] if complete else [root_from_leaf_hashes(leaves)]
        k = split_point(n)
        if m <= k:
            return [*subproof(m, leaves[:k], complete), root_from_leaf_hashes(leaves[k:])]
        return [*subproof(m - k, leaves[k:], False), root_from_leaf_hashes(leaves[:k])]

    return subproof(old_size, hashes, True)


def verify_consistency(
    old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """RFC 9162 §2.1.4.2: True when the tree of ``new_size`` leaves with head
    ``new_root`` extends the tree of ``old_size`` leaves with head ``old_root``."""
    if len(old_root) != 32 or len(new_root) != 32 or any(len(p) != 32 for p in proof):
        return False
    if not 0 < old_size <= new_size:
        return False
    if old_size == new_size:
        return not proof and old_root == new_root
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # an exact power of two: the old root is a node
        path.insert(0, old_root)
    if not path:
        return False
    fn, sn = old_size - 1, new_size - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    first = second = path[0]
    for node in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            first = node_hash(node, first)
            second = node_hash(node, second)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            second = node_hash(second, node)
        fn >>= 1
        sn >>= 1
    return sn == 0 and first == old_root and second == new_root
