"""RFC 6962 tree against the Certificate Transparency reference vectors.

Vectors: transparency-dev/merkle ``testonly/constants.go`` (leaves, roots for sizes 0-8)
and ``proof/verify_test.go`` (audit paths; its leaf numbers are 1-based).
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tpmledger.provenance.merkle import (
    EMPTY_ROOT,
    inclusion_proof,
    leaf_hash,
    merkle_root,
    root_from_leaf_hashes,
    split_point,
    verify_inclusion,
)

LEAVES = [
    bytes.fromhex(h)
    for h in (
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    )
]
ROOTS = [
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]
# (1-based leaf, tree size, audit path)
PROOFS = [
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (3, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        2,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (1, 1, []),
]


@pytest.mark.parametrize("size", range(9))
def test_roots_match_ct_reference(size: int) -> None:
    assert merkle_root(LEAVES[:size]).hex() == ROOTS[size]


def test_empty_root_is_sha256_of_nothing() -> None:
    assert root_from_leaf_hashes([]) == EMPTY_ROOT == hashlib.sha256(b"").digest()


@pytest.mark.parametrize(("leaf", "size", "path"), PROOFS)
def test_audit_paths_match_ct_reference(leaf: int, size: int, path: list[str]) -> None:
    hashes = [leaf_hash(d) for d in LEAVES[:size]]
    assert [p.hex() for p in inclusion_proof(hashes, leaf - 1)] == path
    root = bytes.fromhex(ROOTS[size])
    proof = [bytes.fromhex(p) for p in path]
    assert verify_inclusion(leaf - 1, size, hashes[leaf - 1], proof, root)


@pytest.mark.parametrize(("leaf", "size", "path"), PROOFS[:4])
def test_corrupted_proofs_are_rejected(leaf: int, size: int, path: list[str]) -> None:
    hashes = [leaf_hash(d) for d in LEAVES[:size]]
    root = bytes.fromhex(ROOTS[size])
    proof = [bytes.fromhex(p) for p in path]
    index = leaf - 1
    leaf_h = hashes[index]
    assert not verify_inclusion(index - 1, size, leaf_h, proof, root)
    assert not verify_inclusion(index + 1, size, leaf_h, proof, root)
    assert not verify_inclusion(index, size * 2, leaf_h, proof, root)
    assert not verify_inclusion(index, size // 2, leaf_h, proof, root)
    assert not verify_inclusion(index, size, leaf_hash(b"wrong"), proof, root)
    assert not verify_inclusion(index, size, leaf_h, proof, EMPTY_ROOT)
    assert not verify_inclusion(index, size, leaf_h, [*proof, root], root)
    assert not verify_inclusion(index, size, leaf_h, [root, *proof], root)
    assert not verify_inclusion(index, size, leaf_h, proof[:-1], root)
    for i in range(len(proof)):
        flipped = list(proof)
        flipped[i] = bytes([flipped[i][0] ^ 8]) + flipped[i][1:]
        assert not verify_inclusion(index, size, leaf_h, flipped, root)


def test_split_is_largest_power_of_two_below_n() -> None:
    assert [split_point(n) for n in (2, 3, 4, 5, 8, 9, 1000)] == [1, 2, 2, 4, 4, 8, 512]


def _recursive_root(hashes: list[bytes]) -> bytes:
    if len(hashes) == 1:
        return hashes[0]
    k = split_point(len(hashes))
    return hashlib.sha256(
        b"\x01" + _recursive_root(hashes[:k]) + _recursive_root(hashes[k:])
    ).digest()


@given(st.lists(st.binary(max_size=8), min_size=1, max_size=40))
def test_every_proof_verifies_and_root_matches_definition(data: list[bytes]) -> None:
    hashes = [leaf_hash(d) for d in data]
    root = root_from_leaf_hashes(hashes)
    assert root == _recursive_root(hashes)
    for i in range(len(hashes)):
        assert verify_inclusion(i, len(hashes), hashes[i], inclusion_proof(hashes, i), root)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 8, 13, 64, 100])
def test_all_inclusion_proofs_in_one_pass_equal_each_proof_alone(n: int) -> None:
    from tpmledger.provenance.merkle import all_inclusion_proofs

    hashes = [leaf_hash(bytes([i % 256, i // 256])) for i in range(n)]
    root, paths = all_inclusion_proofs(hashes)
    assert root == root_from_leaf_hashes(hashes)
    assert paths == [inclusion_proof(hashes, i) for i in range(n)]
