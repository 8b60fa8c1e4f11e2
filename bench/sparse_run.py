"""A few spans far apart: what each step costs for a run whose shards each send one span
``--days`` ago and one now (docs/ingest.md#limits).

    .venv/bin/python bench/sparse_run.py [--shards 50] [--days 30] [--out FILE]

Two runs of that shape (``--shards`` × 2 spans, so 2 × shards attempts each) are stored
through the bulk write path ingest uses. Each step then runs in its own process, whose
peak RSS (its own ``VmHWM``, read every 20 ms until it exits) and wall time are printed:

* the live path (``LiveUpdater.update_once``, what the analytics worker runs every poll);
* the seal of each run (``seal_run``, what the worker runs once a run is quiet);
* ``tpmledger summary export`` of the first run;
* in a running ``tpmledger serve ingest`` (the read API), ``GET /v1/runs/RUN`` and
  ``GET /v1/runs/RUN/minutes`` while the run is live (before its seal), then those and
  ``GET /v1/compare?a=…&b=…`` once both are sealed: the RSS of the serving process sampled
  every 20 ms during each request, and after them.

Baseline in the same run: the same steps' figures for a dense run of the same number of
attempts over two minutes (``--shards`` shards, 2 spans each, one minute apart).
Target: every process under 500 MB. Printed and written to ``bench/results/sparse_run.txt``.
"""

from __future__ import annotations

import argparse
import http.client
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ingest_workload as workload
from grpc_bombs import RssWatch, proc_status_kib
from stream_outputs import _child_peak

from tests.analytics.seeding import store
from tests.storage.builders import attempt_row

RESULTS = workload.REPO / "bench" / "results" / "sparse_run.txt"
TARGET_MB = 500
SECOND = 1_000_000_000
DAY = 86_400 * SECOND

_IN_A_PROCESS = {
    "live update": (
        "import sys; from tpmledger.analytics.live.live_updater import LiveUpdater; "
        "LiveUpdater(sys.argv[1]).update_once()"
    ),
    "seal": (
        "import sys; from tpmledger.analytics.seal.sealing import seal_run; "
        "seal_run(sys.argv[1], sys.argv[2])"
    ),
}


def _store_run(url: str, run_id: str, shards: int, gap_ns: int, now_ns: int) -> None:
    rows = []
    for shard in range(shards):
        for end_ns in (now_ns - gap_ns, now_ns):
            rows.append(
                attempt_row(
                    run_id=run_id,
                    shard_id=f"s{shard:03d}",
                    declared_shard_count=shards,
                    start_ns=end_ns - 2 * SECOND,
                    end_ns=end_ns,
                    queue_wait_s=0.1,
                    ttft_s=0.2,
                )
            )
    store(url, rows)


def _get(host: str, port: int, path: str, pid: int) -> tuple[int, int, float, int]:
    """Status, body size, seconds and the serving process's peak RSS (KiB) meanwhile."""
    watch = RssWatch(pid)
    watch.start()
    started = time.monotonic()
    conn = http.client.HTTPConnection(host, port, timeout=1800)
    conn.request("GET", path)
    response = conn.getresponse()
    size = len(response.read())
    took = time.monotonic() - started
    conn.close()
    watch.stop()
    return response.status, size, took, watch.peak_kib


def _verdict(kib: int) -> str:
    mb = kib * 1024 / 1e6
    return f"{kib / 1024:.0f} MiB = {mb:.0f} MB ({'met' if mb <= TARGET_MB else 'NOT met'})"


def measure(url: str, label: str, runs: tuple[str, str], say: object, work: Path) -> None:
    """Every step over two stored runs of one shape."""
    emit = say  # type: ignore[assignment]
    command = [sys.executable, "-c"]
    env = {**os.environ, "TPMLEDGER_DATABASE_URL": url, "TPMLEDGER_DATA_DIR": str(work)}
    ingest = workload.start_ingest(url, {"TPMLEDGER_DATA_DIR": str(work)})
    pid = ingest.process.pid

    def get(paths: list[str], when: str) -> None:
        for path in paths:
            status, size, took, peak = _get(ingest.host, ingest.port, path, pid)
            emit(
                f"  [{label}] {when} GET {path}: {status}, {size / 1e6:.1f} MB body, "
                f"{took:.1f} s; serving process peak {_verdict(peak)}"
            )

    try:
        time.sleep(1.0)
        emit(f"  [{label}] serving process at rest: {proc_status_kib(pid, 'VmRSS') / 1024:.0f} MiB")
        peak, took, _ = _child_peak([*command, _IN_A_PROCESS["live update"], url], env)
        emit(
            f"  [{label}] live update (analytics worker's live path): {took:.1f} s, "
            f"{_verdict(peak)}"
        )
        get([f"/v1/runs/{runs[0]}", f"/v1/runs/{runs[0]}/minutes"], "live (not sealed yet):")
        for run_id in runs:
            peak, took, _ = _child_peak([*command, _IN_A_PROCESS["seal"], url, run_id], env)
            emit(f"  [{label}] seal {run_id}: {took:.1f} s, {_verdict(peak)}")
        out = work / f"export-{runs[0]}"
        cli = [sys.executable, "-m", "tpmledger.cli.main"]
        peak, took, _ = _child_peak([*cli, "summary", "export", runs[0], "--out", str(out)], env)
        emit(f"  [{label}] summary export: {took:.1f} s, {_verdict(peak)}")
        get(
            [
                f"/v1/runs/{runs[0]}",
                f"/v1/runs/{runs[0]}/minutes",
                f"/v1/compare?a={runs[0]}&b={runs[1]}",
            ],
            "sealed:",
        )
        emit(
            f"  [{label}] serving process after the requests: "
            f"{proc_status_kib(pid, 'VmRSS') / 1024:.0f} MiB (VmHWM "
            f"{proc_status_kib(pid, 'VmHWM') / 1024:.0f} MiB)"
        )
    finally:
        ingest.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shards", type=int, default=50)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    lines = [
        f"tpmledger sparse run — {stamp}",
        f"command: .venv/bin/python bench/sparse_run.py --shards {args.shards} "
        f"--days {args.days:g}",
        f"machine: {os.cpu_count()} cpus; load average before {os.getloadavg()[0]:.1f}",
    ]
    for line in lines:
        print(line, flush=True)

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    now_ns = time.time_ns() - 10 * 60 * SECOND
    work = Path(tempfile.mkdtemp(prefix="bench-sparse-"))
    with workload.fresh_database() as db:
        say(f"baseline: {args.shards} shards x 2 spans one minute apart")
        dense = ("dense-a", "dense-b")
        for run_id in dense:
            _store_run(db.url, run_id, args.shards, 60 * SECOND, now_ns)
        measure(db.url, "dense", dense, say, work)
        say(f"sparse: {args.shards} shards x 2 spans {args.days:g} days apart")
        sparse = ("sparse-a", "sparse-b")
        for run_id in sparse:
            _store_run(db.url, run_id, args.shards, int(args.days * DAY), now_ns)
        measure(db.url, "sparse", sparse, say, work)
    shutil.rmtree(work, ignore_errors=True)
    say(f"load average after: {os.getloadavg()[0]:.1f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
