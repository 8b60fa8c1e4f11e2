"""Serving a sealed run's entry bundles from a real ingest process, against its hash tiles.

    .venv/bin/python bench/tile_entries.py [--attempts 1000000] [--shards 8] [--rounds 2]

1. A fresh, migrated database (``TPMLEDGER_DATABASE_URL``'s server, else an embedded
   pgserver in a temp dir) receives the run ``bench/seal.py`` generates, sealed once in a
   fresh process (not timed here; its time and peak RSS are printed).
2. Baseline: a fresh ``tpmledger serve ingest`` process serves every hash tile of the
   run's tree (``GET /v1/runs/RUN/tile/<L>/<N>[.p/<W>]``) ``--rounds`` times; its peak RSS
   (VmHWM from /proc/PID/status) and the wall time of the first and the last round.
3. Entries: another fresh ingest process serves every entry bundle
   (``/tile/entries/<N>[.p/<W>]``, docs/provenance.md#tiles) ``--rounds`` times; same
   figures. Each served bundle's entries must hash to the sealed leaf hashes, and the
   entries' root must equal the version's root.

Prints the two processes' peak RSS and times and their ratio (entries / hash tiles): what
serving a run's minute leaves costs over serving what is stored as it is.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from seal_workload import load, run_id_for, seal_peak_rss  # the seal bench's run

from tpmledger.provenance.merkle import leaf_hash, root_from_leaf_hashes
from tpmledger.provenance.tiles import TileRef, parse_entry_bundle, tree_tiles
from tpmledger.storage.server import migrate
from tpmledger.storage.server.database import raw_transaction


def _database() -> tuple[str, Any, Path | None]:
    """The server's URL, the embedded server started (else None) and its data directory."""
    url = os.environ.get("TPMLEDGER_DATABASE_URL")
    if url:
        return url, None, None
    from tpmledger.storage.server.embedded_postgres import EmbeddedPostgres

    data_dir = Path(tempfile.mkdtemp(prefix="tpmledger-bench-tiles-"))
    server = EmbeddedPostgres(data_dir)
    return server.start(), server, data_dir


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def vm_hwm_mib(pid: int) -> int:
    """The process's peak resident set (VmHWM), MiB."""
    with open(f"/proc/{pid}/status") as status:
        line = next(x for x in status if x.startswith("VmHWM:"))
    return int(line.split()[1]) // 1024


class Ingest:
    """A real ``tpmledger serve ingest`` process on free ports."""

    def __init__(self, url: str, data_dir: Path) -> None:
        port = _free_port()
        env = {
            **os.environ,
            "TPMLEDGER_DATABASE_URL": url,
            "TPMLEDGER_DATA_DIR": str(data_dir),
            "TPMLEDGER_LOG_ORIGIN": "bench.test",
        }
        command = [sys.executable, "-m", "tpmledger.cli.main", "serve", "ingest"]
        command += ["--http-port", str(port), "--grpc-port", str(_free_port())]
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        self.process = subprocess.Popen(command, env=env, stdout=self.log, stderr=self.log)
        self.base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"ingest exited:\n{self.log.read().decode(errors='replace')}")
            try:
                if httpx.get(f"{self.base}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("ingest not ready in 60 s")
            time.sleep(0.1)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()


def serve_rounds(
    ingest: Ingest,
    run_id: str,
    tiles: list[TileRef],
    rounds: int,
    check: Callable[[TileRef, bytes], None],
) -> list[float]:
    """Fetch every tile ``rounds`` times; the wall seconds of each round."""
    seconds = []
    with httpx.Client(base_url=f"{ingest.base}/v1/runs/{run_id}/", timeout=600) as client:
        for _ in range(rounds):
            started = time.perf_counter()
            for tile in tiles:
                answer = client.get(tile.path)
                if answer.status_code != 200:
                    raise RuntimeError(f"{tile.path}: {answer.status_code} {answer.text[:300]}")
                check(tile, answer.content)
            seconds.append(time.perf_counter() - started)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    run_id = run_id_for(args.attempts)

    def say(label: str, value: str) -> None:
        print(f"{label:<62} {value}", flush=True)

    print(f"# tpmledger entry bundles served — {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load average {os.getloadavg()}"
    )
    url, server, data_dir = _database()
    key_dir = Path(tempfile.mkdtemp(prefix="tpmledger-bench-tiles-keys-"))
    try:
        migrate.upgrade(url)
        started = time.perf_counter()
        load(url, args.attempts, args.shards, run_id=run_id)
        print(
            f"run: {args.attempts:,} attempts, {args.shards} shards (bench/seal.py's), loaded in "
            f"{time.perf_counter() - started:.1f} s (not timed below)"
        )
        peak, took = seal_peak_rss(url, run_id)
        say("seal (fresh process, not part of serving)", f"{took:8.3f} s, {peak:,} MiB peak")
        with raw_transaction(url) as conn:
            row = conn.execute(
                "SELECT tree_size, merkle_root, leaf_hashes FROM snapshots WHERE run_id = %s "
                "ORDER BY version DESC LIMIT 1",
                (run_id,),
            ).fetchone()
        size, root, blob = int(row[0]), str(row[1]), bytes(row[2])
        hashes = [blob[i : i + 32] for i in range(0, len(blob), 32)]
        every = list(tree_tiles(size))
        hash_tiles = [t for t in every if t.level is not None]
        bundles = [t for t in every if t.level is None]
        say("minute tree", f"{size:,} leaves: {len(hash_tiles)} hash tiles, {len(bundles)} bundles")

        def no_check(tile: TileRef, data: bytes) -> None:
            return None

        entries: dict[int, list[bytes]] = {}

        def check_bundle(tile: TileRef, data: bytes) -> None:
            got = parse_entry_bundle(data)
            start = tile.index * 256
            if [leaf_hash(e) for e in got] != hashes[start : start + tile.width]:
                raise RuntimeError(f"{tile.path}: entries do not hash to the sealed leaf hashes")
            entries[tile.index] = got

        figures = {}
        for name, tiles, check in (
            ("hash tiles (baseline)", hash_tiles, no_check),
            ("entry bundles", bundles, check_bundle),
        ):
            ingest = Ingest(url, key_dir)
            try:
                idle = vm_hwm_mib(ingest.process.pid)
                seconds = serve_rounds(ingest, run_id, tiles, args.rounds, check)
                hwm = vm_hwm_mib(ingest.process.pid)
            finally:
                ingest.stop()
            figures[name] = (hwm, seconds)
            say(f"{name}: ingest peak RSS (ready: {idle} MiB)", f"{hwm:8,} MiB")
            say(f"  first round ({len(tiles)} tiles)", f"{seconds[0]:8.3f} s")
            say(f"  round {args.rounds}", f"{seconds[-1]:8.3f} s")
            say(f"  round {args.rounds}, per tile", f"{seconds[-1] / len(tiles) * 1000:8.1f} ms")
        served = [e for index in sorted(entries) for e in entries[index]]
        rebuilt = root_from_leaf_hashes([leaf_hash(e) for e in served]).hex()
        say("root of the served entries equals the sealed root", str(rebuilt == root))
        (base_hwm, base_s), (hwm, seconds) = figures.values()
        say("entries / hash tiles: peak RSS", f"{hwm / base_hwm:8.2f}")
        say("entries / hash tiles: first round", f"{seconds[0] / base_s[0]:8.2f}")
        print(f"load average after: {os.getloadavg()} (the machine is shared; wall times vary)")
        print(
            f"command: .venv/bin/python bench/tile_entries.py --attempts {args.attempts} "
            f"--shards {args.shards} --rounds {args.rounds}"
        )
    finally:
        if server is not None:
            server.stop()
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)
        shutil.rmtree(key_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
