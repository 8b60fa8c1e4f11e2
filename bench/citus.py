"""Single-node PostgreSQL against a Citus cluster on the same machine: ingest rate and the
seal of a large run, with each node's CPU and the coordinator's memory (README.md#benchmarks,
docs/operations.md#scaling-out).

    .venv/bin/python bench/citus.py --coordinator postgresql://postgres@127.0.0.1:55435/postgres
                                    [--spans 200000] [--attempts 1000000] [--repeat 2]
                                    [--out bench/results/citus.txt]

``--coordinator`` is a Citus coordinator whose ``postgres`` database lists the workers
(e.g. what ``cluster.sh start DIR PORT 2`` prints). Two fresh databases are made on its
server: ``bench_single`` without the citus extension (plain PostgreSQL on the same binary
and disk) and ``bench_citus`` with the extension on every node, the workers registered and
``tpmledger migrate`` run (32 shards per table, Citus's default). For each:

1. ``tpmledger serve ingest`` against it; ``--spans`` spans in 512-span protobuf bodies
   from 8 keep-alive senders (bench/ingest_workload.py): durable spans/s (first send to
   last 200) and rows stored.
2. A run of ``--attempts`` attempts loaded by COPY (bench/seal_workload.py, untimed), then
   ``seal_run(force=True)`` ``--repeat`` times: best wall time and its digests (identical
   on both: the same bytes).

During both, the CPU seconds of every node's server processes (coordinator, each worker)
and the coordinator's peak memory (its processes' private memory plus the largest shared
mapping once, so shared buffers are not counted per backend) are sampled from /proc.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil
import psycopg
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ingest_workload as workload
import seal_workload

from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.storage.server import migrate
from tpmledger.storage.server.database import get_engine, libpq_url


def _at(url: str, port: int, database: str) -> str:
    return make_url(url).set(port=port, database=database).render_as_string(hide_password=False)


def _nodes(coordinator: str) -> list[int]:
    """Ports of the coordinator and its workers."""
    with psycopg.connect(libpq_url(coordinator), autocommit=True) as conn:
        rows = conn.execute("SELECT nodeport FROM pg_dist_node ORDER BY groupid").fetchall()
    port = int(make_url(coordinator).port or 5432)
    return [port, *(int(p) for (p,) in rows if int(p) != port)]


def _postmasters(ports: list[int]) -> dict[int, psutil.Process]:
    found: dict[int, psutil.Process] = {}
    for process in psutil.process_iter(["name", "cmdline"]):
        cmd = process.info["cmdline"] or []
        if process.info["name"] != "postgres" or "-D" not in cmd:
            continue
        with open(Path(cmd[cmd.index("-D") + 1]) / "postmaster.pid") as pidfile:
            lines = pidfile.read().splitlines()
        if int(lines[0]) == process.pid and int(lines[3]) in ports:
            found[int(lines[3])] = process
    return found


class NodeSampler(threading.Thread):
    """CPU seconds per node (its postmaster and every backend) and the coordinator's peak RSS."""

    def __init__(self, postmasters: dict[int, psutil.Process], coordinator: int) -> None:
        super().__init__(daemon=True)
        self.postmasters, self.coordinator = postmasters, coordinator
        self.cpu: dict[int, dict[int, float]] = {port: {} for port in postmasters}
        self.peak_rss = 0
        self._halt = threading.Event()

    def _sample(self) -> None:
        for port, master in self.postmasters.items():
            private = shared = 0
            for p in [master, *master.children()]:
                try:
                    t = p.cpu_times()
                    self.cpu[port][p.pid] = t.user + t.system
                    memory = p.memory_info()
                except psutil.Error:
                    continue
                # Shared buffers appear in every backend's RSS: counted once.
                private += memory.rss - memory.shared
                shared = max(shared, memory.shared)
            if port == self.coordinator:
                self.peak_rss = max(self.peak_rss, private + shared)

    def run(self) -> None:
        while not self._halt.is_set():
            self._sample()
            self._halt.wait(0.1)

    def stop(self) -> dict[int, float]:
        self._halt.set()
        self.join()
        self._sample()
        return {port: sum(times.values()) for port, times in self.cpu.items()}


@contextmanager
def sampled(coordinator: str) -> Iterator[Callable[[], dict[str, object]]]:
    ports = _nodes(coordinator)
    start = NodeSampler(_postmasters(ports), ports[0])
    start._sample()
    before = {port: sum(t.values()) for port, t in start.cpu.items()}
    sampler = NodeSampler(start.postmasters, ports[0])
    sampler.start()
    result: dict[str, object] = {}
    yield lambda: result
    after = sampler.stop()
    result["cpu"] = {port: after[port] - before.get(port, 0.0) for port in after}
    result["coordinator_peak_rss_mib"] = sampler.peak_rss / 2**20


def make_database(coordinator: str, name: str, distributed: bool) -> str:
    ports = _nodes(coordinator)
    for i, port in enumerate(ports if distributed else ports[:1]):
        with psycopg.connect(libpq_url(_at(coordinator, port, "postgres")), autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            c.execute(f"CREATE DATABASE {name}")
        if distributed and i > 0:
            with psycopg.connect(libpq_url(_at(coordinator, port, name)), autocommit=True) as c:
                c.execute("CREATE EXTENSION citus")
    url = _at(coordinator, ports[0], name)
    if distributed:
        with psycopg.connect(libpq_url(url), autocommit=True) as c:
            c.execute("CREATE EXTENSION citus")
            c.execute("SELECT citus_set_coordinator_host('127.0.0.1', %s)", (ports[0],))
            for port in ports[1:]:
                c.execute("SELECT citus_add_node('127.0.0.1', %s)", (port,))
    migrate.upgrade(url)
    return url


def measure(
    coordinator: str, url: str, args: argparse.Namespace, say: Callable[[str], None]
) -> None:
    bodies = workload.build_bodies(args.spans, 512)
    ingest = workload.start_ingest(url)
    try:
        with sampled(coordinator) as nodes:
            sent = workload.send_in_child_process(ingest.host, ingest.port, bodies, 8)
    finally:
        ingest.stop()
    stored = workload.count_rows(url)
    rate = args.spans / (sent.finished - sent.started)
    say(f"  ingest: {rate:,.0f} durable spans/s, {stored:,} of {args.spans:,} rows stored")
    say(f"    {_nodes_text(nodes())}")
    run_id = seal_workload.run_id_for(args.attempts, None)
    t0 = time.perf_counter()
    seal_workload.load(
        url, args.attempts, 8, run_id, seal_workload.dense_cap(args.attempts, 8, None)
    )
    say(
        f"  loaded {args.attempts:,} attempts by COPY in {time.perf_counter() - t0:.1f} s (untimed)"
    )
    best = None
    for n in range(args.repeat):
        with sampled(coordinator) as nodes:
            t0 = time.perf_counter()
            result = seal_run(url, run_id, force=True)
            took = time.perf_counter() - t0
        say(f"  seal #{n + 1}: {took:.2f} s; {_nodes_text(nodes())}")
        best = took if best is None else min(best, took)
        digest = (
            f"merkle_root {result.document['minutes']['merkle_root']}  "
            f"events_sha256 {result.document['events']['sha256']}"
        )
    say(f"  best seal: {best:.2f} s  digests: {digest}")


def _nodes_text(result: dict[str, object]) -> str:
    cpu = result["cpu"]
    assert isinstance(cpu, dict)
    ports = sorted(cpu)
    parts = [f"node {p} cpu {cpu[p]:.1f} s" for p in ports]
    return ", ".join(parts) + f"; coordinator peak RSS {result['coordinator_peak_rss_mib']:.0f} MiB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--spans", type=int, default=200_000)
    parser.add_argument("--attempts", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--only", choices=("single", "citus"), default=None)
    parser.add_argument("--out", type=Path, default=Path("bench/results/citus.txt"))
    args = parser.parse_args()
    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    say(
        "# tpmledger on Citus vs single-node — "
        + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    )
    say(
        f"machine: {os.cpu_count()} cores shared by every node, the ingest and the senders; "
        f"load average before {os.getloadavg()[0]:.1f}"
    )
    for name, distributed in (("bench_single", False), ("bench_citus", True)):
        if args.only and args.only != name.removeprefix("bench_"):
            continue
        url = make_database(args.coordinator, name, distributed)
        say(
            f"Citus: coordinator + {len(_nodes(args.coordinator)) - 1} workers:"
            if distributed
            else "single-node PostgreSQL 15 (same server binary):"
        )
        measure(args.coordinator, url, args, say)
        get_engine(url).dispose()
    say(f"load average after {os.getloadavg()[0]:.1f}")
    say(
        f"command: .venv/bin/python bench/citus.py --coordinator URL --spans {args.spans} "
        f"--attempts {args.attempts} --repeat {args.repeat}"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as out:
        out.write("\n".join(lines) + "\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
