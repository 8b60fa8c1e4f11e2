"""Live figures: freshness under load, and the cost of a live update against run size.

    .venv/bin/python bench/live.py [--freshness-seconds 60] [--high-rate 15000]
                                   [--sizes 100000,1000000,10000000] [--stream-batches 30]
                                   [--checkpoint-every-s S] [--low-rate-seconds S]
                                   [--settle-seconds S] [--out bench/results/live.txt (appended)]

(a) Freshness (docs/metrics.md#live-figures). ``tpmledger serve ingest`` and
    ``tpmledger serve analytics`` run as child processes on an embedded PostgreSQL. Paced
    senders (another process) post OTLP/protobuf batches of one run (32 spans at the
    simulator's rate, 512 at the high one) at a target rate: the simulator's load
    (8 shards × 16 in flight, ~2 s calls: 64 spans/s) and ``--high-rate``. Once a second
    a probe posts one span of shard ``probe`` in the same run; from its 200 (committed)
    until ``GET /v1/runs/{run}/minutes?shard_id=probe`` counts it is that span's freshness.
    p50/p95 over the probes; the rate ingest actually acknowledged is printed beside the
    target (the machine may not reach it). Memory: the worker's own peak RSS (sampled
    every 0.2 s, and its VmHWM since it started) apart from the peak of any child process
    it starts (a seal: checkpoints and quiet-run reseals), and the seals it logged.
    ``--checkpoint-every-s`` sets the worker's TPMLEDGER_CHECKPOINT_EVERY_S (a phase of a
    few minutes then sees checkpoints of the busy run); ``--settle-seconds`` keeps the
    worker running after the last phase, so the quiet run's final seal is measured too.
(b) Cost per live update. For each size, a run of that many attempts (bench/seal.py's
    generator, COPYed in chunks; no marks) then receives the same stream: ``--stream-batches``
    batches of 512 attempts, one second of stream time each, written through the bulk
    writer as ingest writes them (which queues the touched minutes). After each batch the
    live updater runs once; its CPU (this process) plus PostgreSQL's CPU (every server
    process, from /proc) is one update's cost. Median and p95 per size, and the ratio of
    the largest median to the smallest (target: under 2).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import multiprocessing
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psutil
import psycopg
from ingest_workload import build_bodies, percentile, start_ingest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from seal import _postgres_cpu
from seal_workload import generate

from tests.otlp_values import key_value as _kv
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.storage.schema.models import ATTEMPT_COPY_COLUMNS
from tpmledger.storage.server import migrate
from tpmledger.storage.server.database import get_engine, libpq_url, raw_transaction
from tpmledger.storage.server.embedded_postgres import EmbeddedPostgres
from tpmledger.storage.writers.bulk_writer import write_attempts

SECOND = 1_000_000_000
SIMULATOR_RATE = 64  # 8 shards x 16 in flight / ~2 s per call
BATCH = 512
CHUNK = 1_000_000


def _new_database(admin_url: str) -> str:
    from sqlalchemy.engine import make_url

    name = f"live_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(libpq_url(admin_url), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    migrate.upgrade(url)
    get_engine(url).dispose()
    return url


# -- (a) freshness ------------------------------------------------------------------------


def _probe_body(run_id: str, serial: int) -> bytes:
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    rs.resource.attributes.extend(
        [_kv("tpmledger.run.id", run_id), _kv("tpmledger.shard.id", "probe")]
    )
    span = rs.scope_spans.add().spans.add()
    now = time.time_ns()
    span.trace_id = uuid.uuid4().bytes
    span.span_id = (serial | 1 << 61).to_bytes(8, "big")
    span.name = "chat probe"
    span.start_time_unix_nano = now - SECOND
    span.end_time_unix_nano = now
    span.attributes.extend(
        [
            _kv("gen_ai.operation.name", "chat"),
            _kv("gen_ai.usage.input_tokens", 10),
            _kv("gen_ai.usage.output_tokens", 5),
        ]
    )
    return request.SerializeToString()


def _paced_sender(
    port: int,
    bodies: list[bytes],
    batch: int,
    rate: float,
    seconds: float,
    senders: int,
    out: Any,
) -> None:
    """Post body j at start + j × batch / rate (or as soon as possible when behind)."""
    lock = threading.Lock()
    nxt = [0]
    acked = [0]
    start = time.monotonic()
    interval = batch / rate

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        while True:
            with lock:
                j = nxt[0]
                nxt[0] += 1
            due = start + j * interval
            if due - start >= seconds or j >= len(bodies):
                break
            if due > time.monotonic():
                time.sleep(due - time.monotonic())
            while True:
                try:
                    conn.request(
                        "POST",
                        "/v1/traces",
                        body=bodies[j],
                        headers={"Content-Type": "application/x-protobuf"},
                    )
                    response = conn.getresponse()
                    response.read()
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                    time.sleep(0.2)
                    continue
                if response.status == 200:
                    with lock:
                        acked[0] += batch
                    break
                time.sleep(float(response.getheader("Retry-After") or 1))
        conn.close()

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(senders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.send((acked[0], time.monotonic() - start))
    out.close()


def _visible(api: str, run_id: str, reads: list[float] | None = None) -> int:
    started = time.monotonic()
    answer = httpx.get(f"{api}/v1/runs/{run_id}/minutes", params={"shard_id": "probe"}, timeout=10)
    if reads is not None:
        reads.append(time.monotonic() - started)
    if answer.status_code != 200:
        return 0
    return sum(m["calls_in_minute"] for m in answer.json()["minutes"])


class TreePeaks(threading.Thread):
    """The peak RSS of one process on its own, and of each of its descendants (a seal in a
    child process), sampled every ``interval`` seconds. A child's VmHWM is read too, so
    its true peak counts as long as it was sampled once before it exited."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.interval = interval
        self.own_peak = 0
        self.children: dict[int, int] = {}  # pid -> peak bytes seen
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            with contextlib.suppress(psutil.Error):
                self.own_peak = max(self.own_peak, self.process.memory_info().rss)
                for child in self.process.children(recursive=True):
                    with contextlib.suppress(psutil.Error, OSError, ValueError):
                        peak = max(child.memory_info().rss, _vm_hwm(child.pid))
                        self.children[child.pid] = max(self.children.get(child.pid, 0), peak)
            self._stop_event.wait(self.interval)

    def stop(self) -> tuple[int, int, int]:
        """(own peak, the largest child's peak, children seen), bytes."""
        self._stop_event.set()
        self.join()
        return self.own_peak, max(self.children.values(), default=0), len(self.children)


def _vm_hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def _say_memory(say: Any, peaks: TreePeaks, worker_pid: int) -> None:
    own, child, children = peaks.stop()
    hwm = _vm_hwm(worker_pid)
    say(
        f"    analytics worker's own peak RSS during the phase: {own / 2**20:,.0f} MiB "
        f"(its VmHWM since start: {hwm / 2**20:,.0f} MiB = {hwm / 1e6:,.0f} MB); "
        + (
            f"its child processes (seals): {children}, largest peak {child / 2**20:,.0f} MiB"
            if children
            else "no child process"
        )
    )


def _say_seals(say: Any, log: Path, since: int) -> int:
    """The seal lines the worker logged since byte ``since``; returns the new offset."""
    with log.open("rb") as handle:
        handle.seek(since)
        text = handle.read().decode(errors="replace")
    for line in text.splitlines():
        if "checkpoint" in line or "seal" in line:
            say(f"    worker: {line.strip()[:600]}")
    return since + len(text.encode())


def freshness(
    port: int, rate: float, seconds: float, say: Any, worker_pid: int, worker_log: Path
) -> None:
    run_id = f"live_{int(rate)}_{uuid.uuid4().hex[:6]}"
    api = f"http://127.0.0.1:{port}"
    # Fleets export in batches: 512 spans at high rates, ~32 (an SDK's few seconds of
    # one shard) at the simulator's.
    batch = BATCH if rate > 1000 else 32
    total = int(rate * seconds * 1.2) // batch * batch + batch
    bodies = build_bodies(
        total, batch, run_id=run_id, base_ns=time.time_ns(), step_ns=int(SECOND / rate)
    )
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    senders = 8 if rate > 1000 else 2
    sender = ctx.Process(
        target=_paced_sender,
        args=(port, bodies, batch, rate, seconds, senders, child),
        daemon=True,
    )
    sender.start()
    peaks = TreePeaks(worker_pid)
    peaks.start()
    log_at = worker_log.stat().st_size
    delays: list[float] = []
    reads: list[float] = []  # each GET of the probe's minutes
    missed = 0
    started = time.monotonic()
    serial = 0
    while time.monotonic() - started < seconds:
        serial += 1
        body = _probe_body(run_id, serial)
        answer = httpx.post(
            f"{api}/v1/traces",
            content=body,
            headers={"Content-Type": "application/x-protobuf"},
            timeout=60,
        )
        acked_at = time.monotonic()
        if answer.status_code != 200:
            time.sleep(0.5)
            continue
        while _visible(api, run_id, reads) < serial:
            if time.monotonic() - acked_at > 60:
                missed += 1
                break
            time.sleep(0.05)
        else:
            delays.append(time.monotonic() - acked_at)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - acked_at)))
    acked, elapsed = parent.recv()
    sender.join()
    p50, p95 = percentile(delays, 0.5), percentile(delays, 0.95)
    say(
        f"  target {rate:,.0f} spans/s: ingest acknowledged {acked / elapsed:,.0f} spans/s "
        f"({acked:,} spans in {elapsed:.0f} s); freshness over {len(delays)} probes: "
        f"p50 {p50 if p50 is None else f'{p50:.2f}'} s, p95 "
        f"{p95 if p95 is None else f'{p95:.2f}'} s, max {max(delays, default=0):.2f} s"
        + (f", {missed} not visible within 60 s" if missed else "")
        + " (target p95 <= 2 s)"
    )
    if reads:
        say(
            f"    GET /minutes (the probe's check) over {len(reads)} reads: p50 "
            f"{percentile(reads, 0.5):.3f} s, p95 {percentile(reads, 0.95):.3f} s, "
            f"max {max(reads):.3f} s"
        )
    _say_memory(say, peaks, worker_pid)
    _say_live_updates(say, worker_log, log_at)
    _say_seals(say, worker_log, log_at)


_LIVE_LINE = re.compile(
    r"live (?P<run>\S+): (?P<minutes>\d+) minutes, (?P<read>\d+) attempts read, "
    r"(?P<wall>[0-9.]+)s \((?P<stages>[^)]*)\)(?:, cpu (?P<cpu>[0-9.]+)s)?"
)


def _say_live_updates(say: Any, log: Path, since: int) -> None:
    """With ``--verbose-worker``: the live updates the worker logged since byte ``since``,
    their wall time and where it went (the stages of analytics/live/run_update.py)."""
    with log.open("rb") as handle:
        handle.seek(since)
        text = handle.read().decode(errors="replace")
    walls: list[float] = []
    cpus: list[float] = []
    stages: dict[str, float] = {}
    for match in _LIVE_LINE.finditer(text):
        walls.append(float(match["wall"]))
        if match["cpu"] is not None:
            cpus.append(float(match["cpu"]))
        for part in match["stages"].split(", "):
            name, _, value = part.rpartition(" ")
            stages[name] = stages.get(name, 0.0) + float(value.rstrip("s"))
    if not walls:
        return
    total = sum(walls)
    say(
        f"    live updates: {len(walls)}, wall p50 {percentile(walls, 0.5):.3f} s, p95 "
        f"{percentile(walls, 0.95):.3f} s, max {max(walls):.3f} s; share of their wall time: "
        + ", ".join(f"{name} {value / total:.0%}" for name, value in stages.items())
        + (
            f"; the worker's CPU per update p50 {percentile(cpus, 0.5):.3f} s, p95 "
            f"{percentile(cpus, 0.95):.3f} s (its own process, not PostgreSQL's)"
            if cpus
            else ""
        )
    )


def settle(seconds: float, say: Any, worker_pid: int, worker_log: Path) -> None:
    """Keep the worker running with no new data: the quiet runs get their final seals."""
    say(f"  after the last phase, {seconds:g} s with no new data (quiet runs are sealed):")
    peaks = TreePeaks(worker_pid)
    peaks.start()
    log_at = worker_log.stat().st_size
    time.sleep(seconds)
    _say_memory(say, peaks, worker_pid)
    _say_seals(say, worker_log, log_at)


def _analytics_worker(
    url: str, checkpoint_every_s: float | None, verbose: bool = False
) -> tuple[subprocess.Popen[bytes], Path]:
    log = Path(tempfile.mkstemp(prefix="bench-analytics-", suffix=".log")[1])
    env = {**os.environ, "TPMLEDGER_DATABASE_URL": url}
    if checkpoint_every_s is not None:
        env["TPMLEDGER_CHECKPOINT_EVERY_S"] = f"{checkpoint_every_s:g}"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tpmledger.cli.main",
                *(["-v"] if verbose else []),
                "serve",
                "analytics",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return worker, log


# -- (b) cost per update ------------------------------------------------------------------


def load_run(url: str, run_id: str, attempts: int) -> int:
    """COPY a generated run in chunks and write its ``runs`` row; returns its last end."""
    columns = (
        "trace_id, span_id, parent_span_id, run_id, shard_id, declared_shard_count, "
        "concurrency_cap, call_id, call_id_explicit, resend_count, start_ns, end_ns, "
        "queue_wait_s, ttft_s, prompt_tokens, completion_tokens, model, provider, "
        "operation_name, status, error_type, http_status, convention, span_name, span_kind, "
        "span_attributes, resource_attributes"
    )
    first = last = max_slot = 0
    for offset in range(0, attempts, CHUNK):
        frame = generate(min(CHUNK, attempts - offset), 8, offset=offset, run_id=run_id)
        data = frame.write_csv(include_header=False).encode()
        ends = frame.get_column("end_ns")
        first = int(ends.min()) if offset == 0 else min(first, int(ends.min()))  # type: ignore[arg-type]
        last = max(last, int(ends.max()))  # type: ignore[arg-type]
        waits = frame.get_column("queue_wait_s").fill_null(0.0) * SECOND
        slot = (ends - frame.get_column("start_ns") + waits.cast(int)).max()
        max_slot = max(max_slot, int(slot))  # type: ignore[arg-type]
        statement = f"COPY attempts ({columns}) FROM STDIN (FORMAT csv)"
        with raw_transaction(url) as conn, conn.cursor() as cur, cur.copy(statement) as copy:
            copy.write(data)
    with raw_transaction(url) as conn:
        conn.execute(
            "INSERT INTO runs (run_id, first_event_ns, last_event_ns, shard_ids, "
            "declared_shard_count, concurrency_cap, attempts, max_slot_ns) "
            "VALUES (%s, %s, %s, %s, 8, 16, %s, %s)",
            (run_id, first, last, [str(s) for s in range(8)], attempts, max_slot),
        )
    with raw_transaction(url) as conn:
        conn.execute("ANALYZE attempts")
    return last


def stream_batch(run_id: str, after_ns: int, b: int) -> list[tuple[Any, ...]]:
    """Batch ``b`` of the stream: 512 attempts ending within one second of stream time."""
    rows = []
    for k in range(BATCH):
        end = after_ns + b * SECOND + k * (SECOND // BATCH)
        serial = b * BATCH + k
        values = {
            "trace_id": uuid.uuid4().bytes,
            "span_id": (serial | 1 << 60).to_bytes(8, "big"),
            "parent_span_id": None,
            "run_id": run_id,
            "shard_id": str(k % 8),
            "declared_shard_count": 8,
            "concurrency_cap": 16,
            "sweep_id": None,
            "call_id": f"stream-{serial}",
            "call_id_explicit": True,
            "resend_count": None,
            "start_ns": end - 2 * SECOND,
            "end_ns": end,
            "queue_wait_s": 0.05,
            "ttft_s": 0.3,
            "prompt_tokens": 600,
            "completion_tokens": 200,
            "reported_total_tokens": None,
            "cache_read_tokens": None,
            "cache_write_tokens": None,
            "reasoning_tokens": None,
            "model": "gpt-4o-mini",
            "provider": "openai",
            "operation_name": "chat",
            "finish_reasons": ["stop"],
            "status": "ok",
            "error_type": None,
            "http_status": 200,
            "convention": "semconv",
            "span_name": "chat gpt-4o-mini",
            "span_kind": 3,
            "span_attributes": "{}",
            "resource_attributes": "{}",
            "quota_values_ignored": 0,
        }
        rows.append(tuple(values.get(c) for c in ATTEMPT_COPY_COLUMNS))
    return rows


def update_cost(admin_url: str, server: Any, size: int, batches: int, say: Any) -> float:
    url = _new_database(admin_url)
    run_id = f"live_cost_{size}"
    started = time.perf_counter()
    last = load_run(url, run_id, size)
    say(f"  {size:>10,} attempts loaded in {time.perf_counter() - started:.0f} s (not timed)")
    updater = LiveUpdater(url)
    costs, walls, minutes, read = [], [], [], []
    for b in range(batches):
        with raw_transaction(url) as conn:
            write_attempts(conn, stream_batch(run_id, last + SECOND, b))
        pg0 = _postgres_cpu(server) or 0.0
        (update,) = updater.update_once()
        pg = (_postgres_cpu(server) or 0.0) - pg0
        costs.append(update.cpu_s + pg)
        walls.append(update.wall_s)
        minutes.append(update.minutes)
        read.append(update.attempts_read)
    median = statistics.median(costs)
    say(
        f"  {size:>10,} attempts: CPU per update median {median * 1000:.1f} ms, p95 "
        f"{(percentile(costs, 0.95) or 0) * 1000:.1f} ms (this process + PostgreSQL); wall "
        f"median {statistics.median(walls) * 1000:.1f} ms; minutes recomputed per update "
        f"{statistics.median(minutes):.0f}, attempts read {statistics.median(read):,.0f}"
    )
    get_engine(url).dispose()
    return median


def _busy_loop() -> None:
    while True:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--freshness-seconds", type=float, default=60)
    parser.add_argument("--high-rate", type=float, default=15_000)
    parser.add_argument("--sizes", default="100000,1000000,10000000")
    parser.add_argument("--stream-batches", type=int, default=30)
    parser.add_argument(
        "--checkpoint-every-s",
        type=float,
        default=None,
        help="the worker's TPMLEDGER_CHECKPOINT_EVERY_S (default: its own, 300 s)",
    )
    parser.add_argument(
        "--low-rate-seconds",
        type=float,
        default=None,
        help="length of the simulator-rate phase (default: --freshness-seconds; 0 skips it)",
    )
    parser.add_argument(
        "--settle-seconds",
        type=float,
        default=0,
        help="keep the worker running this long after the last phase (final seals)",
    )
    parser.add_argument("--skip-freshness", action="store_true")
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument(
        "--cpu-load",
        type=int,
        default=0,
        help="busy-looping processes competing for the cores during the freshness phases",
    )
    parser.add_argument(
        "--verbose-worker",
        action="store_true",
        help="run the worker with -v and summarize its live updates per phase (stages)",
    )
    parser.add_argument("--out", type=Path, default=Path("bench/results/live.txt"))
    args = parser.parse_args()
    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    low_s = args.freshness_seconds if args.low_rate_seconds is None else args.low_rate_seconds
    data_dir = Path(tempfile.mkdtemp(prefix="tpmledger-bench-live-"))
    server = EmbeddedPostgres(data_dir)
    admin_url = server.start()
    say(f"# tpmledger live benchmark — {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    say(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load average {os.getloadavg()}"
    )
    try:
        if not args.skip_freshness:
            url = _new_database(admin_url)
            ingest = start_ingest(url)
            worker, worker_log = _analytics_worker(
                url, args.checkpoint_every_s, args.verbose_worker
            )
            low_s = (
                args.freshness_seconds if args.low_rate_seconds is None else args.low_rate_seconds
            )
            try:
                say("(a) freshness: ingest 200 -> span counted in GET /v1/runs/{run}/minutes")
                if args.checkpoint_every_s is not None:
                    say(f"  worker: TPMLEDGER_CHECKPOINT_EVERY_S={args.checkpoint_every_s:g}")
                phases = [(SIMULATOR_RATE, low_s), (args.high_rate, args.freshness_seconds)]
                hogs = [
                    multiprocessing.get_context("fork").Process(target=_busy_loop, daemon=True)
                    for _ in range(args.cpu_load)
                ]
                for hog in hogs:
                    hog.start()
                if hogs:
                    say(f"  competing load: {len(hogs)} busy-looping processes")
                try:
                    for rate, seconds in phases:
                        if seconds > 0:
                            freshness(ingest.port, rate, seconds, say, worker.pid, worker_log)
                finally:
                    for hog in hogs:
                        hog.kill()
                if args.settle_seconds > 0:
                    settle(args.settle_seconds, say, worker.pid, worker_log)
            finally:
                worker.terminate()
                worker.wait(30)
                ingest.stop()
        if not args.skip_cost:
            sizes = [int(s) for s in args.sizes.split(",")]
            say(
                f"(b) analytics CPU per live update, the same stream ({args.stream_batches} "
                f"batches x {BATCH} attempts, 1 s of stream time each) into runs of each size"
            )
            medians = [
                update_cost(admin_url, server, size, args.stream_batches, say) for size in sizes
            ]
            say(f"  largest / smallest median: {max(medians) / min(medians):.2f}x (target < 2x)")
        say(f"load average after: {os.getloadavg()} (the machine is shared; times vary)")
        say(
            "command: .venv/bin/python bench/live.py "
            f"--freshness-seconds {args.freshness_seconds:g} --high-rate {args.high_rate:g} "
            f"--sizes {args.sizes} --stream-batches {args.stream_batches}"
            + (
                f" --checkpoint-every-s {args.checkpoint_every_s:g}"
                if args.checkpoint_every_s is not None
                else ""
            )
            + (f" --low-rate-seconds {low_s:g}" if args.low_rate_seconds is not None else "")
            + (f" --settle-seconds {args.settle_seconds:g}" if args.settle_seconds else "")
            + (" --skip-freshness" if args.skip_freshness else "")
            + (" --skip-cost" if args.skip_cost else "")
            + (f" --cpu-load {args.cpu_load}" if args.cpu_load else "")
            + (" --verbose-worker" if args.verbose_worker else "")
        )
    finally:
        server.stop()
        shutil.rmtree(data_dir, ignore_errors=True)  # GBs after a few minutes at 15,000 spans/s
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as out:  # dated sections: earlier results stay
        out.write("\n".join(lines) + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
