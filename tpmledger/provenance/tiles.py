"""Tiles and entry bundles (c2sp.org/tlog-tiles): a run's minute tree as static files
(docs/provenance.md#tiles).

- ``tile/<L>/<N>[.p/<W>]``: the ``N``-th tile at level ``L`` — 256 (or, partial, ``W``)
  consecutive 32-byte hashes; at level 0 the leaf hashes, at level ``L`` the Merkle tree
  hashes of full level ``L-1`` tiles, i.e. ``MTH(D[(N·256+i)·256^L : (N·256+i+1)·256^L])``.
- ``tile/entries/<N>[.p/<W>]``: the leaves themselves (the minute leaf bytes), each as a
  big-endian uint16 length and the bytes.
- ``<N>`` is written in three-digit path elements, all but the last prefixed with ``x``
  (1234067 → ``x001/x234/067``); ``<W>`` (1..255) only for a partial tile.

A tree of size ``s`` has, at level ``L``, ``s // 256^L`` hashes: full tiles and, for the
remainder, one partial tile of width ``(s // 256^L) % 256``. A tile's bytes depend only on
the leaves it spans, so while the log only grows a tile (full or partial of width ``W``)
never changes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from tpmledger.provenance.merkle import root_from_leaf_hashes

TILE_HEIGHT = 8
TILE_WIDTH = 1 << TILE_HEIGHT
HASH_SIZE = 32
MAX_LEVEL = 63
MAX_ENTRY = 0xFFFF

_INDEX = re.compile(r"^(?:x\d{3}/)*\d{3}$")
_DECIMAL = re.compile(r"^(?:0|[1-9]\d*)$")


class TileError(ValueError):
    """A tile path, tile or entry bundle is malformed or not part of the tree."""


@dataclass(frozen=True)
class TileRef:
    """One tile: ``level`` (None for an entry bundle), ``index`` and ``width`` (1..256)."""

    level: int | None
    index: int
    width: int = TILE_WIDTH

    @property
    def partial(self) -> bool:
        return self.width < TILE_WIDTH

    @property
    def path(self) -> str:
        """``tile/<L>/<N>[.p/<W>]`` or ``tile/entries/<N>[.p/<W>]``."""
        head = "entries" if self.level is None else str(self.level)
        suffix = f".p/{self.width}" if self.partial else ""
        return f"tile/{head}/{encode_index(self.index)}{suffix}"


def encode_index(index: int) -> str:
    """``N`` as zero-padded three-digit path elements, all but the last prefixed ``x``."""
    if index < 0:
        raise TileError(f"tile index {index} is negative")
    groups = [index % 1000]
    index //= 1000
    while index:
        groups.append(index % 1000)
        index //= 1000
    groups.reverse()
    return "/".join([*(f"x{g:03d}" for g in groups[:-1]), f"{groups[-1]:03d}"])


def parse_tile_path(path: str) -> TileRef:
    """Parse ``tile/<L>/<N>[.p/<W>]`` or ``tile/entries/<N>[.p/<W>]`` (canonical form only)."""
    rest = path.removeprefix("/")
    if not rest.startswith("tile/"):
        raise TileError(f"{path!r} is not a tile path (tile/<L>/<N>[.p/<W>])")
    head, _, rest = rest[len("tile/") :].partition("/")
    if head == "entries":
        level: int | None = None
    elif _DECIMAL.match(head) and int(head) <= MAX_LEVEL:
        level = int(head)
    else:
        raise TileError(f"tile level {head!r} is not 0..63 (or 'entries')")
    index_text, dot, width_text = rest.partition(".p/")
    if not _INDEX.match(index_text):
        raise TileError(f"tile index {index_text!r} is not three-digit x-prefixed elements")
    groups = [int(g.removeprefix("x")) for g in index_text.split("/")]
    if len(groups) > 1 and groups[0] == 0:
        raise TileError(f"tile index {index_text!r} has a leading x000 element")
    index = 0
    for group in groups:
        index = index * 1000 + group
    width = TILE_WIDTH
    if dot:
        if not _DECIMAL.match(width_text) or not 1 <= int(width_text) < TILE_WIDTH:
            raise TileError(f"partial tile width {width_text!r} is not 1..255")
        width = int(width_text)
    return TileRef(level, index, width)


def level_hashes(leaf_hashes: Sequence[bytes], level: int) -> list[bytes]:
    """The hashes at tile level ``level``: the tree hash of each full 256^level-leaf block."""
    hashes = list(leaf_hashes)
    for _ in range(level):
        full = len(hashes) // TILE_WIDTH
        hashes = [
            root_from_leaf_hashes(hashes[i * TILE_WIDTH : (i + 1) * TILE_WIDTH])
            for i in range(full)
        ]
    return hashes


def level_count(tree_size: int, level: int) -> int:
    """How many hashes level ``level`` of a tree of ``tree_size`` leaves holds."""
    return tree_size // TILE_WIDTH**level


def tile_for(tree_size: int, level: int | None, index: int) -> TileRef | None:
    """The tile ``index`` of ``level`` (None: entries) as a tree of ``tree_size`` has it:
    full, partial at its width, or None when the tree has no such tile."""
    count = level_count(tree_size, level or 0)
    if (index + 1) * TILE_WIDTH <= count:
        return TileRef(level, index)
    width = count - index * TILE_WIDTH
    return TileRef(level, index, width) if 0 < width < TILE_WIDTH else None


def tree_tiles(tree_size: int) -> Iterator[TileRef]:
    """Every hash tile and entry bundle of a tree of ``tree_size`` leaves (full and partial)."""
    level = 0
    while (count := level_count(tree_size, level)) > 0:
        for index in range((count + TILE_WIDTH - 1) // TILE_WIDTH):
            tile = tile_for(tree_size, level, index)
            assert tile is not None
            yield tile
            if level == 0:
                yield TileRef(None, tile.index, tile.width)
        level += 1


def tile_data(hashes_at_level: Sequence[bytes], tile: TileRef) -> bytes:
    """The bytes of ``tile`` from the hashes of its level; refuse a tile beyond them."""
    start = tile.index * TILE_WIDTH
    if start + tile.width > len(hashes_at_level):
        raise TileError(f"{tile.path} is beyond the tree ({len(hashes_at_level)} hashes there)")
    return b"".join(hashes_at_level[start : start + tile.width])


def split_tile(data: bytes, tile: TileRef) -> list[bytes]:
    """A hash tile's bytes as ``tile.width`` hashes; refuse a tile of the wrong length."""
    if len(data) != tile.width * HASH_SIZE:
        raise TileError(f"{tile.path} holds {len(data)} bytes, expected {tile.width * HASH_SIZE}")
    return [data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)]


def entry_bundle(entries: Sequence[bytes]) -> bytes:
    """Entries as a bundle: each a big-endian uint16 length and its bytes."""
    parts = []
    for entry in entries:
        if len(entry) > MAX_ENTRY:
            raise TileError(f"an entry of {len(entry)} bytes does not fit a uint16 length")
        parts.append(len(entry).to_bytes(2, "big") + entry)
    return b"".join(parts)


def bundle_for(entries: Sequence[bytes], tile: TileRef) -> bytes:
    """The entry bundle ``tile`` (level None) from all the tree's entries."""
    start = tile.index * TILE_WIDTH
    if start + tile.width > len(entries):
        raise TileError(f"{tile.path} is beyond the tree ({len(entries)} entries)")
    return entry_bundle(entries[start : start + tile.width])


def parse_entry_bundle(data: bytes) -> list[bytes]:
    """The entries of a bundle; refuse a truncated one."""
    entries, at = [], 0
    while at < len(data):
        if at + 2 > len(data):
            raise TileError("entry bundle ends inside a length prefix")
        size = int.from_bytes(data[at : at + 2], "big")
        if at + 2 + size > len(data):
            raise TileError("entry bundle ends inside an entry")
        entries.append(data[at + 2 : at + 2 + size])
        at += 2 + size
    return entries


def tree_tile_files(
    leaf_hashes: Sequence[bytes], entries: Sequence[bytes] | None = None
) -> Iterator[tuple[TileRef, bytes]]:
    """Every tile of the tree over ``leaf_hashes`` with its bytes (entry bundles too when
    ``entries`` are given): what a static copy of the log holds."""
    size = len(leaf_hashes)
    levels: dict[int, list[bytes]] = {0: list(leaf_hashes)}
    for tile in tree_tiles(size):
        if tile.level is None:
            if entries is not None:
                yield tile, bundle_for(entries, tile)
            continue
        if tile.level not in levels:
            levels[tile.level] = level_hashes(levels[tile.level - 1], 1)
        yield tile, tile_data(levels[tile.level], tile)
