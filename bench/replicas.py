"""Two ingest processes and two analytics workers against one of each, in one run
(docs/operations.md#replicas).

Starts PostgreSQL (embedded pgserver in a temp dir, or ``--admin-url``). For each setup
(1+1, then 2+2) it makes a fresh migrated database, starts the ingest processes and
analytics workers, and has 8 senders post the SAME pre-encoded 512-span protobuf batches,
spread round-robin over the ingest processes. A span counts only when its request was
answered 200 (= committed). Then it waits until the workers drained the live queue and
sealed the run, and compares the two setups' newest versions (events and figures digests)
and stored rows.

    .venv/bin/python bench/replicas.py [--spans 100000] [--senders 8]

Prints durable spans/s of each setup, their ratio, where the machine's CPU went (so the
bound is visible on a small machine), peak RSS (VmHWM) of each process, and whether the
figures and seals' contents are the same. A measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ingest_quick import build_batch, fresh_database, start_ingest

from tpmledger.storage.server.database import libpq_url


def send_split(bases: list[str], bodies: list[bytes], senders: int, batch: int) -> dict[str, float]:
    """8 senders, sender i posting to ingest ``i % len(bases)``; a span counts on 200."""
    work: queue.Queue[bytes] = queue.Queue()
    for body in bodies:
        work.put(body)
    latencies: list[float] = []
    lock = threading.Lock()

    def sender(base: str) -> None:
        headers = {"Content-Type": "application/x-protobuf"}
        with httpx.Client(timeout=120) as client:
            while True:
                try:
                    body = work.get_nowait()
                except queue.Empty:
                    return
                while True:
                    t0 = time.perf_counter()
                    answer = client.post(f"{base}/v1/traces", content=body, headers=headers)
                    if answer.status_code == 200:
                        with lock:
                            latencies.append(time.perf_counter() - t0)
                        break
                    if answer.status_code != 503:
                        raise RuntimeError(f"unexpected {answer.status_code}: {answer.text[:200]}")
                    time.sleep(float(answer.headers.get("retry-after", "1")))

    threads = [
        threading.Thread(target=sender, args=(bases[i % len(bases)],)) for i in range(senders)
    ]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "elapsed_s": elapsed,
        "spans_per_s": len(latencies) * batch / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
    }


def start_worker(url: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "TPMLEDGER_DATABASE_URL": url,
        "TPMLEDGER_RESEAL_QUIET_S": "2",
        "TPMLEDGER_ANALYTICS_POLL_S": "0.5",
        "TPMLEDGER_CHECKPOINT_EVERY_S": "0",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "tpmledger.cli.main", "serve", "analytics"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine (/proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def _tree(pid: int) -> list[int]:
    """``pid`` and its live descendants (ingest's normalizer processes, PostgreSQL's
    backends)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*/children"):
            try:
                todo += [int(child) for child in task.read_text().split()]
            except OSError:
                continue
    return found


def process_cpu_s(pid: int) -> float:
    """CPU seconds of ``pid`` and its descendants, the exited ones they waited for included."""
    total = 0.0
    for member in _tree(pid):
        try:
            fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


def wait_idle(pid: int, limit_s: float = 90.0) -> None:
    """Until ``pid`` used under 5 % of a core for a second (or ``limit_s`` passed)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        before = process_cpu_s(pid)
        time.sleep(1.0)
        if process_cpu_s(pid) - before < 0.05:
            return


def postmaster_pid(url: str) -> int:
    data_dir = query(url, "SHOW data_directory")[0][0]
    return int((Path(data_dir) / "postmaster.pid").read_text().split()[0])


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def query(url: str, sql: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(libpq_url(url)) as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


def run_setup(
    admin_url: str, replicas: int, bodies: list[bytes], senders: int, batch: int
) -> dict[str, Any]:
    url = fresh_database(admin_url)
    ingests = [start_ingest(url) for _ in range(replicas)]
    workers = [start_worker(url) for _ in range(replicas)]
    try:
        bases = [base for _, base in ingests]
        for worker in workers:  # start-up (compiling the kernels) is not part of the load
            wait_idle(worker.pid)
        busy0, total0 = cpu_ticks()
        postgres = postmaster_pid(url)
        cpu0 = {p.pid: process_cpu_s(p.pid) for p, _ in ingests} | {
            p.pid: process_cpu_s(p.pid) for p in workers
        }
        cpu0[postgres] = process_cpu_s(postgres)
        own0 = time.process_time()
        figures = send_split(bases, bodies, senders, batch)
        busy1, total1 = cpu_ticks()
        cpu = {pid: process_cpu_s(pid) - before for pid, before in cpu0.items()}
        senders_cpu = time.process_time() - own0
        started = time.perf_counter()
        expected = len(bodies) * batch
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            drained = query(url, "SELECT count(*) FROM live_dirty") == [(0,)]
            sealed = query(
                url,
                "SELECT count(*) FROM snapshots s JOIN runs r USING (run_id) "
                "WHERE s.final AND s.data_as_of = r.updated_at",
            )
            if drained and sealed[0][0] >= 1:
                break
            time.sleep(0.5)
        settle_s = time.perf_counter() - started
        rss = {
            "ingest": [peak_rss_mb(p.pid) for p, _ in ingests],
            "worker": [peak_rss_mb(p.pid) for p in workers],
        }
        stored = query(url, "SELECT count(*) FROM attempts")[0][0]
        versions = query(
            url,
            "SELECT version, events_sha256, metrics_sha256, merkle_root FROM snapshots "
            "ORDER BY version",
        )
        doubled = query(
            url, "SELECT count(*) - count(DISTINCT (events_sha256, final)) FROM snapshots"
        )[0][0]
        return {
            **figures,
            "replicas": replicas,
            "stored": stored,
            "expected": expected,
            "machine_busy": (busy1 - busy0) / max(1, total1 - total0),
            "ingest_cpu_s": sum(cpu[p.pid] for p, _ in ingests),
            "worker_cpu_s": sum(cpu[p.pid] for p in workers),
            "postgres_cpu_s": cpu[postgres],
            "senders_cpu_s": senders_cpu,
            "settle_s": settle_s,
            "rss": rss,
            "versions": versions,
            "doubled": doubled,
        }
    finally:
        for proc in [p for p, _ in ingests] + workers:
            proc.send_signal(signal.SIGTERM)
        for proc in [p for p, _ in ingests] + workers:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--admin-url", default=os.environ.get("TPMLEDGER_TEST_ADMIN_URL"))
    args = parser.parse_args()
    server = None
    admin_url = args.admin_url
    if not admin_url:
        from tpmledger.storage.server.embedded_postgres import (
            remove_throwaway_server,
            throwaway_server,
        )

        tmp = Path(tempfile.mkdtemp(prefix="tpmledger-bench-"))
        os.environ.setdefault("XDG_RUNTIME_DIR", str(tmp / "run"))
        (tmp / "run").mkdir(mode=0o700, exist_ok=True)
        server = throwaway_server(tmp / "pg")
        admin_url = str(server.get_uri("postgres"))
    try:
        rng = random.Random(7)
        n_batches = max(1, args.spans // args.batch)
        bodies = [build_batch(i % 8, args.batch, rng) for i in range(n_batches)]
        results = [run_setup(admin_url, n, bodies, args.senders, args.batch) for n in (1, 2)]
        load = os.getloadavg()
        print(
            f"replicas: {args.senders} senders x {args.batch}-span protobuf batches, "
            f"{n_batches * args.batch} spans, the same bodies for both setups, "
            f"{os.cpu_count()} CPUs, load average {load[0]:.1f}"
        )
        for r in results:
            print(
                f"{r['replicas']}+{r['replicas']}: durable spans/s {r['spans_per_s']:,.0f}; "
                f"p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms; machine CPU busy "
                f"{r['machine_busy']:.0%} over {r['elapsed_s']:.1f} s; CPU during the load: "
                f"ingest {r['ingest_cpu_s']:.1f} s, workers {r['worker_cpu_s']:.1f} s, "
                f"PostgreSQL {r['postgres_cpu_s']:.1f} s, senders {r['senders_cpu_s']:.1f} s; "
                f"live drained and sealed "
                f"{r['settle_s']:.1f} s after; peak RSS ingest "
                f"{', '.join(f'{v:.0f}' for v in r['rss']['ingest'])} MB, workers "
                f"{', '.join(f'{v:.0f}' for v in r['rss']['worker'])} MB; stored "
                f"{r['stored']} of {r['expected']}; versions {len(r['versions'])}, "
                f"sealed twice: {r['doubled']}"
            )
        one, two = results
        ratio = two["spans_per_s"] / one["spans_per_s"]
        print(f"ratio 2+2 / 1+1: {ratio:.2f}")
        same = one["versions"][-1][1:] == two["versions"][-1][1:]
        print(f"same newest version content (events, figures, minute root): {same}")
        ok = same and all(r["stored"] == r["expected"] and r["doubled"] == 0 for r in results)
        return 0 if ok else 1
    finally:
        if server is not None:
            remove_throwaway_server(server)


if __name__ == "__main__":
    sys.exit(main())
