"""Tile paths, tile contents and proofs computed from tiles alone (c2sp.org/tlog-tiles)."""

from __future__ import annotations

import hashlib

import pytest

from tpmledger.provenance.merkle import (
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    root_from_leaf_hashes,
    verify_consistency,
    verify_inclusion,
)
from tpmledger.provenance.tile_proofs import TiledTree
from tpmledger.provenance.tiles import (
    TileError,
    TileRef,
    encode_index,
    entry_bundle,
    parse_entry_bundle,
    parse_tile_path,
    tree_tile_files,
    tree_tiles,
)


class MemoryTiles:
    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.reads: list[str] = []

    def read(self, path: str) -> bytes:
        self.reads.append(path)
        if path not in self.files:
            raise TileError(f"no {path}")
        return self.files[path]


def _entries(n: int) -> list[bytes]:
    return [f"leaf {i}".encode() for i in range(n)]


def _tiles(entries: list[bytes]) -> MemoryTiles:
    hashes = [leaf_hash(e) for e in entries]
    return MemoryTiles({t.path: data for t, data in tree_tile_files(hashes, entries)})


@pytest.mark.parametrize(
    ("index", "text"),
    [(0, "000"), (5, "005"), (999, "999"), (1000, "x001/000"), (1234067, "x001/x234/067")],
)
def test_index_path_elements(index: int, text: str) -> None:
    assert encode_index(index) == text
    assert parse_tile_path(f"tile/3/{text}") == TileRef(3, index)


def test_tile_paths_round_trip_and_refuse_non_canonical_forms() -> None:
    assert parse_tile_path("tile/0/x001/x234/067.p/8") == TileRef(0, 1234067, 8)
    assert parse_tile_path("tile/entries/000.p/5") == TileRef(None, 0, 5)
    assert TileRef(None, 1, 5).path == "tile/entries/001.p/5"
    bad_paths = ["tile/00/000", "tile/64/000", "tile/0/1", "tile/0/x000/001", "tile/0/000.p/0"]
    bad_paths += ["tile/0/000.p/256", "tile/0/000.p/08", "tile/0/001/002", "tiles/0/000"]
    for bad in bad_paths:
        with pytest.raises(TileError):
            parse_tile_path(bad)


def test_tile_counts_of_the_spec_example() -> None:
    # "a tree of size 70,000 will be represented by 273 full level 0 tiles, one partial
    # level 0 tile of width 112, one full level 1 tile, one partial level 1 tile of width
    # 17, and one partial level 2 tile of width 1."
    tiles = [t for t in tree_tiles(70_000) if t.level is not None]
    full0 = [t for t in tiles if t.level == 0 and not t.partial]
    assert len(full0) == 273
    partial = {(t.level, t.width) for t in tiles if t.partial}
    assert partial == {(0, 112), (1, 17), (2, 1)}
    assert len([t for t in tiles if t.level == 1 and not t.partial]) == 1
    assert [(t.level, t.width) for t in tree_tiles(256) if t.level is not None] == [
        (0, 256),
        (1, 1),
    ]


def test_level_one_hashes_are_roots_of_full_level_zero_tiles() -> None:
    entries = _entries(600)
    tiles = _tiles(entries)
    hashes = [leaf_hash(e) for e in entries]
    level1 = tiles.files["tile/1/000.p/2"]
    assert level1[:32] == root_from_leaf_hashes(hashes[:256])
    assert level1[32:] == root_from_leaf_hashes(hashes[256:512])
    assert tiles.files["tile/0/002.p/88"] == b"".join(hashes[512:600])
    assert parse_entry_bundle(tiles.files["tile/entries/002.p/88"]) == entries[512:600]


@pytest.mark.parametrize("size", [1, 2, 7, 255, 256, 257, 511, 1000, 65_536 + 300])
def test_proofs_from_tiles_equal_proofs_from_all_leaves(size: int) -> None:
    entries = _entries(size)
    hashes = [leaf_hash(e) for e in entries]
    root = root_from_leaf_hashes(hashes)
    tree = TiledTree(_tiles(entries), size)
    assert tree.root() == root
    for index in sorted({0, size // 3, size - 1}):
        proof = tree.inclusion_proof(index)
        assert proof == inclusion_proof(hashes, index)
        assert verify_inclusion(index, size, tree.leaf_hash(index), proof, root)
    for old in sorted({1, size // 2 or 1, size - 1 or 1, size}):
        proof = tree.consistency_proof(old)
        assert proof == consistency_proof(hashes, old)
        old_root = root_from_leaf_hashes(hashes[:old])
        assert verify_consistency(old, size, old_root, root, proof)


def test_a_tampered_tile_breaks_the_proof() -> None:
    entries = _entries(300)
    tiles = _tiles(entries)
    data = bytearray(tiles.files["tile/0/000"])
    data[0] ^= 1
    tiles.files["tile/0/000"] = bytes(data)
    hashes = [leaf_hash(e) for e in entries]
    tree = TiledTree(tiles, 300)
    proof = tree.consistency_proof(100)
    assert not verify_consistency(
        100, 300, root_from_leaf_hashes(hashes[:100]), root_from_leaf_hashes(hashes), proof
    )


@pytest.mark.slow
def test_entry_bundles_are_uint16_length_prefixed() -> None:
    assert entry_bundle([b"ab", b""]) == b"\x00\x02ab\x00\x00"
    assert parse_entry_bundle(b"\x00\x02ab\x00\x00") == [b"ab", b""]
    with pytest.raises(TileError):
        parse_entry_bundle(b"\x00\x05ab")
    assert hashlib.sha256(b"\x00ab").digest() == leaf_hash(b"ab")
