"""``/metrics`` with per-run series: scrape latency with 200 runs in its window, and what a
1-second scraper costs ingest's throughput (docs/operations.md#per-run-series).

    .venv/bin/python bench/metrics_scrape.py [--runs 200] [--live 100] [--minutes 30]
                                             [--scrapes 60] [--phase-seconds 15]
                                             [--out bench/results/metrics_scrape.txt]

A fresh database (embedded PostgreSQL, or on ``TPMLEDGER_DATABASE_URL``'s server) gets
``--runs`` runs of 8 shards, each ``--minutes`` minutes long and ending inside the window:
``runs - live`` sealed (final), and ``--live`` live runs, half of them sealed as a checkpoint
first and then given more data (sealed rows overlaid by live rows), the other half never
sealed (live rows only); the live updater has run over all of them, as the analytics worker
would. ``tpmledger serve ingest`` runs as a child process.

(a) Latency: ``--scrapes`` sequential ``GET /metrics`` (after 3 warm-up scrapes); p50 / p95
    against the 200 ms target, and against the baseline of the same ingest's ``/metrics``
    on an empty database (ingest's own series only), measured in the same run.
(b) Ingest cost: 8 senders post 512-span batches for ``--phase-seconds`` without a scraper,
    then with one scraping ``/metrics`` every second, then again without and with (ABAB, to
    even out drift on a shared machine); spans/s of each pair and their ratio. Peak RSS of
    ingest (VmHWM) at the end.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
from ingest_workload import (
    build_bodies,
    cpu_seconds,
    fresh_database,
    percentile,
    send_bodies,
    start_ingest,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, for tests/

from tests.storage.builders import attempt_row
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.durations import MINUTE_NS, SECOND_NS
from tpmledger.storage.server.database import raw_transaction
from tpmledger.storage.writers.bulk_writer import write_attempts

SHARDS = 8
PER_SHARD_MINUTE = 4


def _run_rows(run_id: str, first_minute_ns: int, minutes: int) -> list[tuple[object, ...]]:
    rows = []
    for minute in range(minutes):
        for shard in range(SHARDS):
            for k in range(PER_SHARD_MINUTE):
                end = first_minute_ns + minute * MINUTE_NS + (5 + 12 * k) * SECOND_NS
                rows.append(
                    attempt_row(
                        run_id=run_id,
                        shard_id=str(shard),
                        start_ns=end - 3 * SECOND_NS,
                        end_ns=end,
                        resend_count=1 if k == 3 and minute % 3 == 0 else 0,
                        ttft_s=0.1 + 0.05 * k,
                        status="error" if k == 3 and minute % 3 == 0 else "ok",
                    )
                )
    return rows


def populate(url: str, runs: int, live: int, minutes: int) -> dict[str, float]:
    """The runs of the window; seconds spent per step."""
    now_minute = time.time_ns() // MINUTE_NS * MINUTE_NS
    first = now_minute - (minutes + 5) * MINUTE_NS
    started = time.perf_counter()
    with raw_transaction(url) as conn:
        for i in range(runs):
            write_attempts(conn, _run_rows(f"bench-run-{i:03d}", first, minutes))
    stored = time.perf_counter()
    sealed = [f"bench-run-{i:03d}" for i in range(runs - live)]
    checkpointed = [f"bench-run-{i:03d}" for i in range(runs - live, runs - live // 2)]
    for run_id in sealed + checkpointed:
        seal_run(url, run_id, force=True)
    t_seal = time.perf_counter()
    # Checkpointed live runs get 5 more minutes (up to now); all live runs go live.
    with raw_transaction(url) as conn:
        for run_id in checkpointed:
            write_attempts(conn, _run_rows(run_id, first + minutes * MINUTE_NS, 5))
    updater = LiveUpdater(url)
    while updater.update_once():
        pass
    t_live = time.perf_counter()
    return {"store": stored - started, "seal": t_seal - stored, "live": t_live - t_seal}


def scrape_latencies(base: str, count: int) -> tuple[list[float], int, int]:
    """Seconds of each scrape, the per-run series lines and bytes of the last one."""
    times = []
    with httpx.Client(timeout=30) as client:
        for _ in range(3):
            client.get(f"{base}/metrics")
        for _ in range(count):
            t0 = time.perf_counter()
            answer = client.get(f"{base}/metrics")
            times.append(time.perf_counter() - t0)
            assert answer.status_code == 200
    lines = sum(1 for line in answer.text.splitlines() if line.startswith("tpmledger_run_"))
    return times, lines, len(answer.content)


class Scraper(threading.Thread):
    """GET /metrics once a second until stopped."""

    def __init__(self, base: str) -> None:
        super().__init__(daemon=True)
        self.base = base
        self.times: list[float] = []
        self._halt = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=30) as client:
            while not self._halt.is_set():
                t0 = time.perf_counter()
                client.get(f"{self.base}/metrics")
                self.times.append(time.perf_counter() - t0)
                self._halt.wait(max(1.0 - (time.perf_counter() - t0), 0))

    def stop(self) -> list[float]:
        self._halt.set()
        self.join()
        return self.times


class _Done(Exception):
    """Stop after the latency figures (--skip-ingest-cost)."""


def vm_hwm_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--live", type=int, default=100)
    parser.add_argument("--minutes", type=int, default=30)
    parser.add_argument("--scrapes", type=int, default=60)
    parser.add_argument("--phase-seconds", type=float, default=15.0)
    parser.add_argument(
        "--skip-ingest-cost", action="store_true", help="measure the scrape latency only"
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/metrics_scrape.txt"))
    args = parser.parse_args()
    out: list[str] = []

    def say(line: str) -> None:
        print(line, flush=True)
        out.append(line)

    say(f"# tpmledger /metrics scrape benchmark — {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC")
    say(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; load average {os.getloadavg()}"
    )
    with fresh_database() as empty:
        ingest = start_ingest(empty.url)
        try:
            empty_base = f"http://{ingest.host}:{ingest.port}"
            baseline, _, baseline_bytes = scrape_latencies(empty_base, args.scrapes)
        finally:
            ingest.stop()
    with fresh_database() as db:
        steps = populate(db.url, args.runs, args.live, args.minutes)
        say(
            f"window: {args.runs} runs x {SHARDS} shards x {args.minutes} min "
            f"({args.runs - args.live} sealed, {args.live} live: {args.live - args.live // 2} "
            f"checkpointed then live, {args.live // 2} never sealed); set up in "
            f"{steps['store']:.0f} s store + {steps['seal']:.0f} s seal + {steps['live']:.0f} s "
            "live update (not timed)"
        )
        ingest = start_ingest(db.url)
        base = f"http://{ingest.host}:{ingest.port}"
        try:
            ingest_cpu = cpu_seconds(ingest.process.pid, with_children=True)
            pg_cpu = cpu_seconds(db.postmaster_pid, with_children=True)
            times, lines, size = scrape_latencies(base, args.scrapes + 3)
            times = times[3:]  # the first scrapes fill the sealed runs' cache
            ingest_cpu = (cpu_seconds(ingest.process.pid, with_children=True) or 0) - (
                ingest_cpu or 0
            )
            pg_after = cpu_seconds(db.postmaster_pid, with_children=True)
            pg_cpu = pg_after - pg_cpu if pg_after is not None and pg_cpu is not None else None
            p50, p95 = statistics.median(times), percentile(times, 0.95) or 0.0
            b50, b95 = statistics.median(baseline), percentile(baseline, 0.95) or 0.0
            say(
                f"(a) GET /metrics over {args.scrapes} scrapes: p50 {p50 * 1000:.1f} ms, "
                f"p95 {p95 * 1000:.1f} ms "
                f"(target <= 200 ms: {'met' if p95 <= 0.2 else 'NOT met'}); "
                f"{lines} per-run series lines, {size / 1024:.0f} KiB"
            )
            say(
                f"    baseline, the same ingest's /metrics on an empty database: p50 "
                f"{b50 * 1000:.1f} ms, p95 {b95 * 1000:.1f} ms ({baseline_bytes / 1024:.0f} KiB); "
                f"ratio p50 {p50 / b50:.1f}x"
            )
            per_scrape = ingest_cpu / (args.scrapes + 6) * 1000
            pg_text = (
                f"{pg_cpu / (args.scrapes + 6) * 1000:.0f} ms"
                if pg_cpu is not None
                else "not measured (external server)"
            )
            say(
                f"    CPU per scrape (load-independent; warm-up scrapes included): ingest "
                f"{per_scrape:.0f} ms, PostgreSQL {pg_text}"
            )
            if args.skip_ingest_cost:
                raise _Done
            bodies = build_bodies(200_000, 512)
            rates: dict[str, list[float]] = {"without": [], "with": []}
            scrape_times: list[float] = []
            for phase in ("without", "with", "without", "with"):
                scraper = Scraper(base) if phase == "with" else None
                if scraper:
                    scraper.start()
                sent = send_bodies(
                    ingest.host, ingest.port, bodies, 8, loop_seconds=args.phase_seconds
                )
                if scraper:
                    scrape_times += scraper.stop()
                spans = sum(512 for _ in sent.latencies_s)
                rates[phase].append(spans / (sent.finished - sent.started))
            without = statistics.mean(rates["without"])
            with_scraper = statistics.mean(rates["with"])
            say(
                f"(b) ingest, 8 senders x 512-span batches, "
                f"{args.phase_seconds:.0f} s phases ABAB: "
                f"without scraper {', '.join(f'{r:,.0f}' for r in rates['without'])} spans/s, "
                f"with a 1 s scraper {', '.join(f'{r:,.0f}' for r in rates['with'])} spans/s; "
                f"ratio with / without {with_scraper / without:.3f}"
            )
            if scrape_times:
                say(
                    f"    scrapes under ingest load: {len(scrape_times)}, p50 "
                    f"{statistics.median(scrape_times) * 1000:.0f} ms, p95 "
                    f"{(percentile(scrape_times, 0.95) or 0) * 1000:.0f} ms"
                )
            peak = vm_hwm_mb(ingest.process.pid)
            say(f"    ingest peak RSS (VmHWM, listener process): {peak:.0f} MB")
        except _Done:
            pass
        finally:
            ingest.stop()
    say(f"load average after: {os.getloadavg()} (the machine is shared; times vary)")
    say("command: .venv/bin/python bench/metrics_scrape.py " + " ".join(sys.argv[1:]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as f:
        f.write("\n".join(out) + "\n\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
