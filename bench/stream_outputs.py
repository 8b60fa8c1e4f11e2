"""Whole-run outputs stream: serving ``events.jsonl``, exporting a summary and archiving a run
keep their process's memory flat in the run's size (docs/provenance.md#streaming-seal).

    .venv/bin/python bench/stream_outputs.py [--attempts 1000000 2000000] [--shards 8]
                                             [--out FILE] [--prune-only] [--skip-verify]
                                             [--skip-serving] [--prune-needs-seal]

For each size, a run of the seal benchmarks (bench/seal_workload.py) is loaded into a fresh
database and sealed (in its own process). Then, per run:

* ``GET /v1/runs/RUN/events.jsonl`` from a running ``tpmledger serve ingest`` (the
  serving process): its RSS is sampled every 20 ms during the download (``VmRSS`` of
  /proc/PID/status; the process's own ``VmHWM`` is printed at the end), and so are the
  processes it starts to write the file (their own ``VmHWM``, and the serving process's
  RSS plus theirs at the same moment), and the body's
  SHA-256 must equal the sealed ``events_sha256``; then three downloads at once, of which
  one must get 503 + Retry-After (``TPMLEDGER_HEAVY_REQUESTS`` = 2);
* ``tpmledger events RUN`` in a new process, its output hashed by the bench as it comes
  (never stored): its peak RSS (its own ``VmHWM``, read until it exits) and the SHA-256;
* ``tpmledger summary export RUN --out DIR`` in a new process: its peak RSS; the export is
  deleted once measured (a 10 M-attempt run's events.jsonl is ~3.8 GB);
* ``tpmledger summary verify DIR`` of that export (the full offline verifier; its memory
  grows with the run, ~3 GB at 10 M: ``--skip-verify`` leaves it out);
* at the end, ``tpmledger prune --older-than 1d`` archives every run (gzip event file,
  checked: digest, signature, minute proofs): the peak RSS of that process.

``--prune-only`` loads and seals, then measures prune alone (skips serving and export).
``--prune-needs-seal`` (with ``--prune-only``) leaves the loaded runs unsealed, so prune
seals each first (in a process of its own, whose peak is printed apart).
The results are appended to ``--out`` as a dated section.

Baseline in the same run: the ingest process's RSS at rest before the first download.
Target: ≤ 400 MB in each process. Printed and written to
``bench/results/stream_outputs.txt``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ingest_workload as workload
import seal_workload
from grpc_bombs import RssWatch, proc_status_kib

from tpmledger.storage.server.database import raw_transaction

RESULTS = workload.REPO / "bench" / "results" / "stream_outputs.txt"
TARGET_MB = 400


def _download(host: str, port: int, run_id: str) -> tuple[int, str, int, str | None]:
    """Status, SHA-256 of the body, its size, and Retry-After."""
    conn = http.client.HTTPConnection(host, port, timeout=600)
    conn.request("GET", f"/v1/runs/{run_id}/events.jsonl")
    response = conn.getresponse()
    digest, size = hashlib.sha256(), 0
    while block := response.read(1 << 20):
        digest.update(block)
        size += len(block)
    conn.close()
    return response.status, digest.hexdigest(), size, response.getheader("Retry-After")


def _child_peak(
    command: list[str], env: dict[str, str], descendants: dict[int, int] | None = None
) -> tuple[int, float, str]:
    """Peak RSS (KiB: the child's own ``VmHWM``, read every 20 ms until it exits), wall
    seconds and output of a command. (``ru_maxrss`` from ``wait4`` would not do: Linux
    carries the forking process's peak into the child, and this bench holds a run.)
    ``descendants``, when given, gets the peak of each process the child starts (pid: KiB)."""
    started = time.monotonic()
    peak = 0
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        parent = psutil.Process(process.pid)
        while process.poll() is None:
            peak = max(peak, proc_status_kib(process.pid, "VmHWM"))
            if descendants is not None:
                with contextlib.suppress(psutil.Error):
                    for child in parent.children(recursive=True):
                        kib = proc_status_kib(child.pid, "VmHWM")
                        descendants[child.pid] = max(descendants.get(child.pid, 0), kib)
            time.sleep(0.02)
        out.seek(0)
        text = out.read().decode(errors="replace")
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{text}")
    return peak, time.monotonic() - started, text


def _stdout_peak(command: list[str], env: dict[str, str]) -> tuple[int, float, str, int]:
    """Peak RSS (KiB, the child's ``VmHWM``), wall seconds, SHA-256 and size of a
    command's standard output, hashed a block at a time as it arrives."""
    started = time.monotonic()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    digest, size = hashlib.sha256(), 0
    peak = 0
    halt = threading.Event()

    def watch() -> None:
        nonlocal peak
        while not halt.is_set():
            peak = max(peak, proc_status_kib(process.pid, "VmHWM"))
            halt.wait(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert process.stdout is not None and process.stderr is not None
    while block := process.stdout.read(1 << 20):
        digest.update(block)
        size += len(block)
    peak = max(peak, proc_status_kib(process.pid, "VmHWM"))  # before it is reaped
    errors = process.stderr.read().decode(errors="replace")
    process.wait()
    halt.set()
    watcher.join()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{errors}")
    return peak, time.monotonic() - started, digest.hexdigest(), size


def _met(kib: int) -> str:
    return (
        f"{kib / 1024:.0f} MiB = {kib * 1024 / 1e6:.0f} MB (target <= {TARGET_MB} MB: "
        f"{'met' if kib * 1024 / 1e6 <= TARGET_MB else 'NOT met'})"
    )


def _sealed_sha256(url: str, run_id: str) -> str:
    with raw_transaction(url) as conn:
        row = conn.execute(
            "SELECT events_sha256 FROM snapshots WHERE run_id = %s ORDER BY version DESC LIMIT 1",
            (run_id,),
        ).fetchone()
    return str(row[0]) if row else ""


class WriterWatch(threading.Thread):
    """Every 20 ms: the event-file writer processes the serving process starts
    (``event_file_process``), each one's own ``VmHWM``, and the peak of the serving
    process's VmRSS plus theirs at the same moment."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.parent = psutil.Process(pid)
        self.writers: dict[int, int] = {}
        self.peak_sum_kib = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            with contextlib.suppress(psutil.Error):
                total = proc_status_kib(self.parent.pid, "VmRSS")
                for child in self.parent.children():
                    with contextlib.suppress(psutil.Error, OSError):
                        if "event_file_process" not in " ".join(child.cmdline()):
                            continue
                        hwm = proc_status_kib(child.pid, "VmHWM")
                        self.writers[child.pid] = max(self.writers.get(child.pid, 0), hwm)
                        total += proc_status_kib(child.pid, "VmRSS")
                self.peak_sum_kib = max(self.peak_sum_kib, total)
            self._halt.wait(0.02)

    def stop(self) -> str:
        self._halt.set()
        self.join()
        if not self.writers:
            return "no writer process"
        return (
            f"{len(self.writers)} writer process(es), own peak "
            f"{max(self.writers.values()) / 1024:.0f} MiB; serving + writers at once "
            f"{self.peak_sum_kib / 1024:.0f} MiB"
        )


def _serve(
    url: str, runs: list[tuple[int, str, str]], work: Path, say: Callable[[str], None]
) -> None:
    """GET events.jsonl (one at a time, then three at once) in a serving process."""
    ingest = workload.start_ingest(url, {"TPMLEDGER_DATA_DIR": str(work / "data")})
    pid = ingest.process.pid
    try:
        time.sleep(1.0)
        idle_kib = proc_status_kib(pid, "VmRSS")
        say(f"serving process (tpmledger serve ingest) at rest: {idle_kib / 1024:.0f} MiB")
        for attempts, run_id, sealed in runs:
            watch = RssWatch(pid)
            watch.start()
            writers = WriterWatch(pid)
            writers.start()
            started = time.monotonic()
            status, digest, size, _ = _download(ingest.host, ingest.port, run_id)
            took = time.monotonic() - started
            watch.stop()
            written_by = writers.stop()
            say(
                f"GET events.jsonl of {attempts:,} attempts: {status}, {size / 1e6:,.0f} MB "
                f"in {took:.1f} s, sha256 {'equals' if digest == sealed else 'DIFFERS FROM'}"
                f" the seal's; serving process peak {watch.peak_kib / 1024:.0f} MiB = "
                f"{watch.peak_kib * 1024 / 1e6:.0f} MB (target <= {TARGET_MB} MB: "
                f"{'met' if watch.peak_kib * 1024 / 1e6 <= TARGET_MB else 'NOT met'}); "
                f"{written_by}"
            )
        # Three at once with the default cap of two: one gets 503 + Retry-After.
        attempts, run_id, sealed = runs[-1]
        answers: list[tuple[int, str, int, str | None]] = []
        watch = RssWatch(pid)
        watch.start()
        writers = WriterWatch(pid)
        writers.start()
        threads = [
            threading.Thread(
                target=lambda: answers.append(_download(ingest.host, ingest.port, run_id))
            )
            for _ in range(3)
        ]
        for thread in threads:
            thread.start()
            time.sleep(0.5)
        for thread in threads:
            thread.join()
        watch.stop()
        written_by = writers.stop()
        statuses = sorted((a[0], a[3]) for a in answers)
        say(
            f"3 downloads at once of {attempts:,} attempts: (status, Retry-After) "
            f"{statuses}; all 200s equal the seal: "
            f"{all(a[1] == sealed for a in answers if a[0] == 200)}; serving process "
            f"peak {watch.peak_kib / 1024:.0f} MiB; {written_by}"
        )
        say(
            f"serving process VmHWM over the whole bench: "
            f"{proc_status_kib(pid, 'VmHWM') / 1024:.0f} MiB "
            f"({proc_status_kib(pid, 'VmHWM') / max(idle_kib, 1):.2f} x at rest)"
        )
    finally:
        ingest.stop()


def _serve_and_export(
    url: str,
    runs: list[tuple[int, str, str]],
    work: Path,
    env: dict[str, str],
    say: Callable[[str], None],
    skip_verify: bool = False,
    serve: bool = True,
) -> None:
    """GET events.jsonl (one at a time, then three at once) in a serving process; then
    tpmledger events, summary export and summary verify of each run, each in its own
    process."""
    if serve:
        _serve(url, runs, work, say)

    command = [sys.executable, "-m", "tpmledger.cli.main"]
    env = {**env, "TPMLEDGER_DATABASE_URL": url}
    for attempts, run_id, sealed in runs:
        peak, took, digest, size = _stdout_peak([*command, "events", run_id], env)
        say(
            f"tpmledger events of {attempts:,} attempts: {size / 1e6:,.0f} MB in {took:.1f} s, "
            f"sha256 {'equals' if digest == sealed else 'DIFFERS FROM'} the seal's; "
            f"process peak {_met(peak)}"
        )
    for attempts, run_id, _ in runs:
        out_dir = work / f"export-{run_id}"
        peak, took, _ = _child_peak(
            [*command, "summary", "export", run_id, "--out", str(out_dir)], env
        )
        size = (out_dir / "events.jsonl").stat().st_size
        say(
            f"summary export of {attempts:,} attempts: {took:.1f} s, events.jsonl "
            f"{size / 1e6:,.0f} MB; process peak {_met(peak)}"
        )
        if not skip_verify:
            peak, took, _ = _child_peak([*command, "summary", "verify", str(out_dir)], env)
            say(
                f"  summary verify of that export (offline, standard-library verifier): "
                f"{took:.1f} s; process peak {peak / 1024:.0f} MiB"
            )
        shutil.rmtree(out_dir, ignore_errors=True)  # GBs at 10 M attempts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--attempts", type=int, nargs="+", default=[1_000_000, 2_000_000])
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--prune-only",
        action="store_true",
        help="load and seal, then measure only prune (no serving, export or verify)",
    )
    parser.add_argument(
        "--skip-verify",
        action="store_true",
        help="leave out the offline summary verify of each export (its memory grows with "
        "the run: ~3 GB at 10 M attempts)",
    )
    parser.add_argument(
        "--skip-serving",
        action="store_true",
        help="leave out the downloads from a serving process (tpmledger events, export and "
        "prune are still measured)",
    )
    parser.add_argument(
        "--prune-needs-seal",
        action="store_true",
        help="with --prune-only: do not seal the loaded runs, so prune must seal each first "
        "(in a process of its own, whose peak is printed apart)",
    )
    args = parser.parse_args(argv)

    lines = [
        f"tpmledger whole-run outputs — {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}",
        "command: .venv/bin/python bench/stream_outputs.py --attempts "
        + " ".join(str(a) for a in args.attempts)
        + f" --shards {args.shards}"
        + (" --prune-only" if args.prune_only else "")
        + (" --skip-verify" if args.skip_verify else "")
        + (" --skip-serving" if args.skip_serving else "")
        + (" --prune-needs-seal" if args.prune_needs_seal else ""),
        f"machine: {os.cpu_count()} cpus; load average before {os.getloadavg()[0]:.1f}",
    ]

    def say(line: str) -> None:
        print(line, flush=True)
        lines.append(line)

    for line in lines:
        print(line)
    work = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    with workload.fresh_database() as db:
        runs = []
        for attempts in args.attempts:
            run_id = seal_workload.run_id_for(attempts)
            started = time.monotonic()
            seal_workload.load(db.url, attempts, args.shards, run_id=run_id)
            loaded = time.monotonic() - started
            # Retention goes by arrival (runs.updated_at): the run arrived two days ago
            # (before its seal, whose data_as_of prune compares it with).
            with raw_transaction(db.url) as conn:
                conn.execute(
                    "UPDATE runs SET updated_at = now() - interval '2 days' WHERE run_id = %s",
                    (run_id,),
                )
            if args.prune_needs_seal:  # never sealed: prune must seal it first
                say(f"{attempts:,} attempts: loaded in {loaded:.0f} s; not sealed")
                runs.append((attempts, run_id, ""))
                continue
            seal_mib, seal_s = seal_workload.seal_peak_rss(db.url, run_id)
            say(
                f"{attempts:,} attempts: loaded in {loaded:.0f} s; sealed in {seal_s:.1f} s "
                f"(seal process peak {seal_mib} MiB)"
            )
            runs.append((attempts, run_id, _sealed_sha256(db.url, run_id)))

        env = {**os.environ, "TPMLEDGER_DATA_DIR": str(work / "data")}
        if not args.prune_only:
            _serve_and_export(db.url, runs, work, env, say, args.skip_verify, not args.skip_serving)
        command = [sys.executable, "-m", "tpmledger.cli.main"]
        env["TPMLEDGER_DATABASE_URL"] = db.url
        children: dict[int, int] = {}
        peak, took, text = _child_peak(
            [*command, "prune", "--older-than", "1d", "--archive-dir", str(work / "archive")],
            env,
            children,
        )
        archived = text.count("archived (")
        say(
            f"prune (archive + bounded check + delete) of the {len(runs)} runs "
            f"({', '.join(f'{a:,}' for a, _, _ in runs)} attempts"
            f"{', each needing a seal first' if args.prune_needs_seal else ''}): "
            f"{took:.1f} s, {archived} archived; process peak {_met(peak)}"
        )
        if children:
            say(
                f"  processes prune started (its seals): {len(children)}, peak "
                f"{max(children.values()) / 1024:.0f} MiB (the seal's own budget, not the "
                "archive's)"
            )
    shutil.rmtree(work, ignore_errors=True)  # exports and archives: GBs
    say(f"load average after: {os.getloadavg()[0]:.1f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as out:  # a dated section after the earlier ones
        out.write("\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
