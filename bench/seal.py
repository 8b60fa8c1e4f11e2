"""Seal a generated run (1,000,000 attempts by default) end to end, time every stage and
measure the peak memory of one seal (README.md#benchmarks).

    .venv/bin/python bench/seal.py [--attempts 1000000] [--shards 8] [--repeat 3] [--minutes N]
                                   [--compare-attempts N] [--database-dir DIR]
                                   [--out bench/results/seal.txt]

1. A fresh, migrated database (``TPMLEDGER_DATABASE_URL``'s server, else an embedded
   pgserver in a temp dir, or ``--database-dir`` kept for the next run).
2. A realistic run is generated with Polars (8 shards × cap 16 slots, 1.5–4 s calls,
   prompt 200–2000 / completion 50–750 tokens, 2 % rate-limit errors retried on the same
   call id with resend_count 1, 30 % of attempts reporting queue waits, TTFT on every
   success) and COPYed into ``attempts`` a million rows at a time (plus its ``runs`` row).
   Not timed. With ``--minutes N`` the same calls are packed into N minutes (more slots
   per shard): 2,000,000 attempts in 2 minutes is ~15,000 spans/s, ~900,000 attempts
   ending in one minute, so a seal chunk (whole minutes) holds ~900,000 attempts.
3. ``seal_run`` with ``force=True`` runs ``--repeat`` times; each prints the stages its
   ``StageTimer`` recorded (docs/provenance.md#streaming-seal) with wall seconds and, where
   a stage does not overlap others, this process's CPU seconds: plan (the run's extent,
   caps and shards, its rollups and the attempts of calls with several attempts), fetch
   (waiting for the next chunk, read on a second connection while this one computes),
   compute (minute rows, run sums, diagnostics), canonical_file (waiting for a chunk's
   file to be written and hashed in a worker), merkle, store, and end to end, plus the
   CPU that PostgreSQL's processes used. It also prints the seal's digests (merkle root,
   events_sha256, metrics_sha256): any change in them between two source trees is a
   behaviour change. The best repeat is reported.
4. Analytics alone: ``fold_events`` (the seal's walk as one chunk: minute table + run
   figures; no file, no hashing) on events already in memory, best of ``--repeat`` (up
   to 2 M attempts: it holds the run).
5. Peak RSS of one seal in a fresh process. With ``--compare-attempts N``, a second run of
   N attempts is loaded into the same database and both are sealed in fresh processes,
   alternating, ``--repeat`` times: their wall times, peak RSS and the ratio.

Targets (README.md#benchmarks): end to end ≤ 5 s at 1 M; analytics alone ≥ 5 M
attempts/s; peak RSS ≤ 800 MB at 2 M attempts and ≤ 1.5 GB at 10 M; a 10 M seal ≤ 12 × the
1 M seal measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import polars as pl
from seal_workload import (  # the generated run
    dense_cap,
    load,
    run_id_for,
    run_stored,
    seal_peak_rss,
)

from tpmledger.analytics.kernels.rollups import attempts_to_events, shard_caps
from tpmledger.analytics.kernels.run_figures import RunContext
from tpmledger.analytics.seal.memory_run import fold_events
from tpmledger.analytics.seal.run_computation import StageTimer, load_run
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.storage.server import migrate
from tpmledger.storage.server.database import raw_transaction


def _database(keep_dir: Path | None) -> tuple[str, object | None]:
    url = os.environ.get("TPMLEDGER_DATABASE_URL")
    if url:
        return url, None
    from tpmledger.storage.server.embedded_postgres import EmbeddedPostgres

    data_dir = keep_dir or Path(tempfile.mkdtemp(prefix="tpmledger-bench-seal-"))
    server = EmbeddedPostgres(data_dir)
    return server.start(), server


# Print order of the stages compute_run and seal_run record (others follow as recorded).
STAGE_ORDER = (
    "plan", "fetch", "events", "figures_and_file", "compute", "canonical_file", "hash", "merkle",
    "store",
)  # fmt: skip


def _in_order(stages: dict[str, float]) -> dict[str, float]:
    known = {k: stages[k] for k in STAGE_ORDER if k in stages}
    return known | {k: v for k, v in stages.items() if k not in known}


def _cpu(cpu: dict[str, float], stage: str) -> str:
    """CPU seconds of a stage, or '-' for a stage that overlaps others (wall only)."""
    return f"{cpu[stage]:.3f}" if stage in cpu else "-"


def _postgres_cpu(server: object | None) -> float | None:
    """CPU seconds used so far by the embedded server's processes (None: not measured).

    Postmaster's own and reaped children's times (backends that exited, e.g. the split
    fetch's helper) plus every live child's, from /proc (Linux only).
    """
    pgdata = getattr(server, "pgdata", None)
    try:
        postmaster = int((Path(pgdata) / "postmaster.pid").read_text().split()[0])
        tick = os.sysconf("SC_CLK_TCK")
        total = 0
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # the process ended meanwhile
            pid, ppid = int(stat.parent.name), int(fields[1])
            if pid == postmaster:
                total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
            elif ppid == postmaster:
                total += int(fields[11]) + int(fields[12])
        return total / tick
    except (OSError, TypeError, ValueError, IndexError):
        return None


def _copy_floor(url: str, run_id: str) -> float | None:
    """Seconds PostgreSQL alone needs to produce the run's fetch COPY (to /dev/null)."""
    from psycopg import sql

    from tpmledger.storage.readers.attempt_frames import _copy_query

    try:
        with raw_transaction(url) as conn:
            query = _copy_query(run_id, sql.SQL("TRUE")).as_string(conn)
            to_null = query.replace("TO STDOUT", "TO '/dev/null'")
            started = time.perf_counter()
            conn.execute(to_null.encode())
            return time.perf_counter() - started
    except Exception:  # needs superuser / a local server; the figure is then not measured
        return None


def _analytics_alone(url: str, run_id: str, repeat: int) -> tuple[int, float, float]:
    """Attempts, best wall and best CPU seconds of ``fold_events`` on the whole run
    already in memory (fetched and rollups resolved before timing)."""
    facts, attempts = load_run(url, run_id)
    events = attempts_to_events(attempts)
    context = RunContext(run_id, shard_caps(attempts), facts.declared_shard_count, 16)
    timings, cpu_timings = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fold_events(events, context)
        timings.append(time.perf_counter() - t0)
        cpu_timings.append(time.process_time() - c0)
    return events.height, min(timings), min(cpu_timings)


#: Above this, "analytics alone" (which holds the whole run in memory) is not measured.
ANALYTICS_ALONE_MAX = 2_000_000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/results/seal.txt"))
    parser.add_argument(
        "--database-dir",
        type=Path,
        default=None,
        help="keep the embedded database here and reuse a run already loaded there "
        "(for A/B runs of two source trees on the same data: PYTHONPATH=<tree>)",
    )
    parser.add_argument(
        "--compare-attempts",
        type=int,
        default=None,
        help="also load a run of this many attempts and seal both in fresh processes, "
        "alternating, --repeat times: prints each one's wall time and peak RSS and the "
        "ratio of the --attempts seal to this one (e.g. --attempts 10000000 "
        "--compare-attempts 1000000: target <= 12)",
    )
    parser.add_argument(
        "--minutes",
        type=int,
        default=None,
        help="pack the run's attempts into this many minutes (a dense run: e.g. "
        "--attempts 2000000 --minutes 2 is ~15,000 spans/s, ~900,000 attempts a minute)",
    )
    args = parser.parse_args()
    if args.minutes is not None and args.minutes < 1:
        parser.error("--minutes must be at least 1")
    run_id = run_id_for(args.attempts, args.minutes)
    cap = dense_cap(args.attempts, args.shards, args.minutes)
    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    url, server = _database(args.database_dir)
    try:
        migrate.upgrade(url)
        started = time.perf_counter()
        reused = args.database_dir is not None and run_stored(url, run_id)
        if not reused:
            load(url, args.attempts, args.shards, run_id, cap)
        say(f"# tpmledger seal benchmark — {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
        say(
            f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()}, Polars {pl.__version__}"
        )
        say(
            f"run: {args.attempts:,} attempts, {args.shards} shards × cap {cap}, "
            + (f"packed into {args.minutes} minutes, " if args.minutes else "")
            + ("reused from --database-dir" if reused else "loaded in ")
            + ("" if reused else f"{time.perf_counter() - started:.1f} s (not timed below)")
        )
        say(f"load average before sealing: {os.getloadavg()}")
        best: dict[str, float] | None = None
        best_cpu: dict[str, float] = {}
        best_pg: float | None = None
        for n in range(args.repeat):
            timer = StageTimer()
            pg0 = _postgres_cpu(server)
            t0, c0 = time.perf_counter(), time.process_time()
            result = seal_run(url, run_id, force=True, timer=timer)
            total, total_cpu = time.perf_counter() - t0, time.process_time() - c0
            pg1 = _postgres_cpu(server)
            pg = None if pg0 is None or pg1 is None else pg1 - pg0
            # Stages as this source tree's timer recorded them (older trees name them
            # differently), so one bench file can time two trees.
            stages = _in_order(dict(timer.seconds)) | {"end_to_end": total}
            cpu = dict(timer.cpu_seconds) | {"end_to_end": total_cpu}
            say(
                f"seal #{n + 1}: "
                + "  ".join(f"{k} {v:.3f}s (cpu {_cpu(cpu, k)})" for k, v in stages.items())
                + f"  postgres_cpu {'not measured' if pg is None else f'{pg:.3f}s'}"
                + f"  (v{result.version}, {result.metrics['attempts']:,} events)"
            )
            digests = (
                f"  digests: merkle_root {result.document['minutes']['merkle_root']}  "
                f"events_sha256 {result.document['events']['sha256']}  "
                f"metrics_sha256 {result.document['metrics_sha256']}"
            )
            say(digests)
            if best is None or total < best["end_to_end"]:
                best, best_cpu, best_pg = stages, cpu, pg
        assert best is not None
        say("")
        say(
            f"best end to end: {best['end_to_end']:.3f} s wall, {best_cpu['end_to_end']:.3f} s "
            "CPU of this process (target <= 5 s; PostgreSQL's own CPU is not in the CPU column)"
        )
        for stage in [s for s in best if s != "end_to_end"]:
            say(f"  {stage:<17} {best[stage]:.3f} s wall  {_cpu(best_cpu, stage)} s cpu")
        pg_text = "not measured" if best_pg is None else f"{best_pg:.3f} s"
        floor = _copy_floor(url, run_id)
        floor_text = "not measured" if floor is None else f"{floor:.3f} s wall"
        say(
            f"PostgreSQL CPU during that seal (all server processes): {pg_text}; "
            f"its COPY of the run alone (one backend, TO '/dev/null'): {floor_text}"
        )
        if args.attempts <= ANALYTICS_ALONE_MAX:
            count, analytics_s, analytics_cpu = _analytics_alone(url, run_id, args.repeat)
            say(
                f"analytics alone (fold_events on events in memory, best of {args.repeat}): "
                f"{analytics_s:.3f} s wall = {count / analytics_s / 1e6:.2f} M attempts/s; "
                f"{analytics_cpu:.3f} s CPU (all threads) = "
                f"{count / analytics_cpu / 1e6:.2f} M attempts per CPU-second (target >= 5 M/s)"
            )
        else:
            say(f"analytics alone: not measured above {ANALYTICS_ALONE_MAX:,} attempts")
        rss, took = seal_peak_rss(url, run_id)
        say(
            f"peak RSS of one seal in a fresh process (`seal_run`, force): {rss:,} MiB "
            f"({rss * 2**20 / args.attempts:,.0f} bytes per attempt), {took:.1f} s "
            "(targets: <= 800 MB at 2 M attempts, <= 1.5 GB at 10 M)"
        )
        if args.compare_attempts:
            _compare(url, args, run_id, say)
        say(f"load average after: {os.getloadavg()} (the machine is shared; wall times vary)")
        say(
            f"command: .venv/bin/python bench/seal.py --attempts {args.attempts} "
            f"--shards {args.shards} --repeat {args.repeat}"
            + (f" --minutes {args.minutes}" if args.minutes else "")
            + (f" --compare-attempts {args.compare_attempts}" if args.compare_attempts else "")
        )
    finally:
        if server is not None:
            server.stop()  # type: ignore[attr-defined]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    return 0


def _compare(url: str, args: argparse.Namespace, run_id: str, say: Callable[[str], None]) -> None:
    """Seal the run and a run of ``--compare-attempts`` in fresh processes, alternating."""
    other = run_id_for(args.compare_attempts)
    if not run_stored(url, other):
        load(url, args.compare_attempts, args.shards, other)
    big: list[tuple[int, float]] = []
    small: list[tuple[int, float]] = []
    for _ in range(args.repeat):
        small.append(seal_peak_rss(url, other))
        big.append(seal_peak_rss(url, run_id))
    (big_rss, big_s), (small_rss, small_s) = (
        min(big, key=lambda r: r[1]),
        min(small, key=lambda r: r[1]),
    )
    say(
        f"same database, fresh processes, alternating, best of {args.repeat}: "
        f"{args.compare_attempts:,} attempts {small_s:.1f} s ({small_rss:,} MiB peak), "
        f"{args.attempts:,} attempts {big_s:.1f} s ({big_rss:,} MiB peak): "
        f"ratio {big_s / small_s:.2f} for {args.attempts / args.compare_attempts:.0f}x the "
        "attempts (target: a 10 M seal <= 12 x the 1 M seal)"
    )
    say("  all seals (s, MiB): " + ", ".join(f"{t:.1f}/{r:,}" for r, t in small + big))


if __name__ == "__main__":
    sys.exit(main())
