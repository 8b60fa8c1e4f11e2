"""Inclusion and consistency proofs computed from a log's tiles alone (docs/provenance.md#tiles).

:class:`TiledTree` reads the hash tiles a tree of a given size has (full tiles and the
partial ones of that size) and rebuilds any RFC 6962 subtree hash from them, so a client
holding only a checkpoint and the tiles can compute RFC 9162 proofs (§2.1.3, §2.1.4) and
check them against the checkpoint's root with :mod:`provenance.merkle`. Nothing is taken
on trust: a tile that does not hash into the checked root makes the proof fail.
"""

from __future__ import annotations

from typing import Protocol

from tpmledger.provenance.merkle import EMPTY_ROOT, node_hash, root_from_leaf_hashes, split_point
from tpmledger.provenance.tiles import (
    TILE_HEIGHT,
    TileError,
    TileRef,
    parse_entry_bundle,
    split_tile,
    tile_for,
)


class TileReader(Protocol):
    """Where tiles come from (a URL prefix or a directory, :mod:`provenance.tile_source`)."""

    def read(self, path: str) -> bytes:
        """The bytes at ``path`` (e.g. ``tile/0/000.p/5``); raise ``TileError`` if absent."""
        ...


class TiledTree:
    """The tree of ``tree_size`` leaves as its tiles describe it."""

    def __init__(self, reader: TileReader, tree_size: int) -> None:
        self.reader = reader
        self.tree_size = tree_size
        self._tiles: dict[TileRef, list[bytes]] = {}

    def _level_hash(self, level: int, index: int) -> bytes:
        tile = tile_for(self.tree_size, level, index // (1 << TILE_HEIGHT))
        if tile is None or index % (1 << TILE_HEIGHT) >= tile.width:
            raise TileError(f"hash {index} of level {level} is beyond a tree of {self.tree_size}")
        if tile not in self._tiles:
            self._tiles[tile] = split_tile(self.reader.read(tile.path), tile)
        return self._tiles[tile][index % (1 << TILE_HEIGHT)]

    def subtree(self, height: int, index: int) -> bytes:
        """The hash of the complete subtree of 2^height leaves starting at index·2^height."""
        level, rest = divmod(height, TILE_HEIGHT)
        first = index << rest
        return root_from_leaf_hashes([self._level_hash(level, first + j) for j in range(1 << rest)])

    def range_hash(self, start: int, end: int) -> bytes:
        """MTH(D[start:end]) for a range of the RFC 6962 recursion."""
        size = end - start
        if size <= 0 or end > self.tree_size:
            raise TileError(f"leaves {start}..{end} are not a range of a tree of {self.tree_size}")
        if size & (size - 1) == 0 and start % size == 0:
            return self.subtree(size.bit_length() - 1, start // size)
        k = split_point(size)
        return node_hash(self.range_hash(start, start + k), self.range_hash(start + k, end))

    def root(self) -> bytes:
        return self.range_hash(0, self.tree_size) if self.tree_size else EMPTY_ROOT

    def leaf_hash(self, index: int) -> bytes:
        return self._level_hash(0, index)

    def inclusion_proof(self, index: int) -> list[bytes]:
        """PATH(index, D[0:tree_size]) of RFC 9162 §2.1.3.1."""
        if not 0 <= index < self.tree_size:
            raise TileError(f"leaf {index} is outside a tree of {self.tree_size}")
        path: list[bytes] = []
        start, end = 0, self.tree_size
        while end - start > 1:
            k = split_point(end - start)
            if index < start + k:
                path.append(self.range_hash(start + k, end))
                end = start + k
            else:
                path.append(self.range_hash(start, start + k))
                start += k
        path.reverse()
        return path

    def consistency_proof(self, old_size: int) -> list[bytes]:
        """PROOF(old_size, D[0:tree_size]) of RFC 9162 §2.1.4.1."""
        if not 0 < old_size <= self.tree_size:
            raise TileError(f"old size {old_size} is not in 1..{self.tree_size}")
        proof: list[bytes] = []
        start, end, m, complete = 0, self.tree_size, old_size, True
        while m != end - start:
            k = split_point(end - start)
            if m <= k:
                proof.append(self.range_hash(start + k, end))
                end = start + k
            else:
                proof.append(self.range_hash(start, start + k))
                start, m, complete = start + k, m - k, False
        if not complete:
            proof.append(self.range_hash(start, end))
        proof.reverse()
        return proof

    def entries(self, index: int) -> list[bytes]:
        """The entries of bundle ``index`` as this tree has it (full or partial)."""
        tile = tile_for(self.tree_size, None, index)
        if tile is None:
            raise TileError(f"entry bundle {index} is beyond a tree of {self.tree_size}")
        entries = parse_entry_bundle(self.reader.read(tile.path))
        if len(entries) != tile.width:
            raise TileError(f"{tile.path} holds {len(entries)} entries, expected {tile.width}")
        return entries
