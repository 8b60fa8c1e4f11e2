"""RFC 9162 §2.1.4 consistency proofs: published vectors, and generation against verification."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpmledger.provenance.merkle import (
    consistency_proof,
    leaf_hash,
    root_from_leaf_hashes,
    verify_consistency,
)

VECTORS = json.loads((Path(__file__).parent / "vectors" / "consistency.json").read_text())
LEAF_HASHES = [leaf_hash(bytes.fromhex(leaf)) for leaf in VECTORS["leaves"]]


def _b64(text: str) -> bytes:
    return base64.b64decode(text)


@pytest.mark.parametrize("case", VECTORS["cases"], ids=lambda c: c["desc"])
def test_published_vectors_verify_and_are_generated_exactly(case: dict) -> None:
    proof = [_b64(p) for p in case["proof"] or []]
    ok = verify_consistency(
        case["size1"], case["size2"], _b64(case["root1"]), _b64(case["root2"]), proof
    )
    assert ok is not case["wantErr"]
    if not case["wantErr"]:
        tree = LEAF_HASHES[: case["size2"]]
        assert root_from_leaf_hashes(tree) == _b64(case["root2"])
        assert consistency_proof(tree, case["size1"]) == proof


@given(st.integers(1, 70).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n))))
def test_every_prefix_is_proven_and_tampering_is_caught(sizes: tuple[int, int]) -> None:
    n, m = sizes
    hashes = [leaf_hash(i.to_bytes(4, "big")) for i in range(n)]
    old_root, new_root = root_from_leaf_hashes(hashes[:m]), root_from_leaf_hashes(hashes)
    proof = consistency_proof(hashes, m)
    assert verify_consistency(m, n, old_root, new_root, proof)
    for i in range(len(proof)):
        bad = [*proof]
        bad[i] = bytes(32)
        assert not verify_consistency(m, n, old_root, new_root, bad)
    assert not verify_consistency(m, n, new_root if m != n else bytes(32), new_root, proof)
    if m < n:
        # A tree whose old part changed is not an extension of the old tree.
        changed = [leaf_hash(b"changed"), *hashes[1:]]
        other = consistency_proof(changed, m)
        assert not verify_consistency(m, n, old_root, root_from_leaf_hashes(changed), other)
        assert not verify_consistency(m, n, old_root, new_root, proof[:-1])


def test_sizes_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError):
        consistency_proof(LEAF_HASHES, 0)
    with pytest.raises(ValueError):
        consistency_proof(LEAF_HASHES, 9)
    root = root_from_leaf_hashes(LEAF_HASHES)
    assert not verify_consistency(0, 8, root, root, [])
    assert not verify_consistency(8, 7, root, root, [])
