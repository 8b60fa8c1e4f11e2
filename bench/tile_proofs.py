"""What a witness pays to check a run's log from its tiles, against holding every leaf.

    .venv/bin/python bench/tile_proofs.py [--minutes 525600] [--repeat 3]

A run of ``--minutes`` minutes (default: a year of minutes, far beyond any benchmark run)
is written as static tiles (``summary export --tiles`` writes the same files) into a temp
directory. Then, best of ``--repeat``:

- baseline: the RFC 9162 consistency proof from 1/3 of the tree to all of it computed
  from every leaf hash in memory (``provenance.merkle.consistency_proof``), which is what a
  verifier without tiles would need: all leaves;
- tiles: the same proof computed from the tiles alone (``provenance.tile_proofs``), with
  the number of tiles and bytes it read, and its check against both roots;
- a witness's whole ``cosign`` of the larger checkpoint after the smaller (log signature,
  tree-from-tiles check, proof, cosignature, state update).

Prints times, tiles/bytes read, the tiles/baseline ratio and this process's peak RSS
(VmHWM).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tpmledger.provenance.checkpoint import Checkpoint, log_verifier_key, sign_checkpoint
from tpmledger.provenance.cosignature import generate_witness_key
from tpmledger.provenance.merkle import (
    consistency_proof,
    leaf_hash,
    root_from_leaf_hashes,
    verify_consistency,
)
from tpmledger.provenance.signed_note import parse_verifier_key
from tpmledger.provenance.tile_proofs import TiledTree
from tpmledger.provenance.tile_source import DirectoryTiles
from tpmledger.provenance.tiles import tree_tile_files
from tpmledger.provenance.witness import cosign_checkpoint


class CountingTiles(DirectoryTiles):
    reads = 0
    bytes_read = 0

    def read(self, path: str) -> bytes:
        data = super().read(path)
        CountingTiles.reads += 1
        CountingTiles.bytes_read += len(data)
        return data


def best(repeat: int, run: Callable[[], Any]) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - started)
    return min(times), result


def peak_rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=int, default=525_600)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    size, old = args.minutes, args.minutes // 3
    hashes = [leaf_hash(b'{"minute":%d}' % i) for i in range(size)]
    root, old_root = root_from_leaf_hashes(hashes), root_from_leaf_hashes(hashes[:old])
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        started = time.perf_counter()
        for tile, data in tree_tile_files(hashes):
            (base / tile.path).parent.mkdir(parents=True, exist_ok=True)
            (base / tile.path).write_bytes(data)
        write_s = time.perf_counter() - started
        for tile, data in tree_tile_files(hashes[:old]):  # the older checkpoint's partials
            (base / tile.path).parent.mkdir(parents=True, exist_ok=True)
            (base / tile.path).write_bytes(data)

        baseline_s, proof = best(args.repeat, lambda: consistency_proof(hashes, old))
        assert verify_consistency(old, size, old_root, root, proof)

        def from_tiles() -> list[bytes]:
            CountingTiles.reads = CountingTiles.bytes_read = 0
            return TiledTree(CountingTiles(base), size).consistency_proof(old)

        tiles_s, tile_proof = best(args.repeat, from_tiles)
        assert tile_proof == proof and verify_consistency(old, size, old_root, root, tile_proof)
        reads, read_bytes = CountingTiles.reads, CountingTiles.bytes_read

        log = Ed25519PrivateKey.generate()
        origin = "bench.example/tpmledger/runs/year"
        log_key = parse_verifier_key(log_verifier_key(origin, log.public_key()))
        witness = generate_witness_key("witness.example/w1")
        small = sign_checkpoint(Checkpoint(origin, old, old_root), log)
        large = sign_checkpoint(Checkpoint(origin, size, root), log)
        tiles = DirectoryTiles(base)

        def cosign_both() -> None:
            state = base / f"state-{time.perf_counter_ns()}"
            cosign_checkpoint(small, log_key, witness, state, tiles)
            cosign_checkpoint(large, log_key, witness, state, tiles)

        cosign_s, _ = best(args.repeat, cosign_both)

    print(f"tree: {size} minutes, old checkpoint at {old}; tiles written in {write_s:.2f} s")
    print(f"baseline  consistency proof from all {size} leaf hashes : {baseline_s * 1e3:9.2f} ms")
    print(
        f"tiles     consistency proof from {reads} tiles ({read_bytes / 1024:3.0f} KiB)"
        f"         : {tiles_s * 1e3:9.2f} ms"
    )
    print(f"ratio     tiles / baseline                              : {tiles_s / baseline_s:9.4f}")
    print(f"witness   cosign old then new checkpoint (fresh state)  : {cosign_s * 1e3:9.2f} ms")
    print(f"peak RSS  (VmHWM, includes the in-memory baseline)      : {peak_rss_mib():9.1f} MiB")


if __name__ == "__main__":
    main()
