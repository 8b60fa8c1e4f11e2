"""Durable ingest through ``tpmledger up`` (every service running) against a raw COPY of
the same rows in the same run, with the CPU split per process and database time per
statement class (README.md#benchmarks, issue 39).

    .venv/bin/python bench/ingest_up.py [--spans 204800] [--senders 8] [--batch 512]
                                        [--shape backfill|current] [--cpu-load N]
                                        [--trials N] [--out bench/results/ingest_up.txt]

1. A fresh, migrated database (on ``TPMLEDGER_DATABASE_URL``'s server, else an embedded
   pgserver in a temp dir: to ``up`` it is an external PostgreSQL) and ``tpmledger up``
   (ingest, the analytics worker, the dashboard) on free ports and a temp data dir. The
   bench waits until the analytics worker is idle (its kernels warmed), so the load meets
   every service as a user's fleet would.
2. ``--spans`` rich LLM spans (tokens, TTFT, explicit call ids; bench/ingest_workload.py)
   of one run, pre-serialized as ``--batch``-span OTLP/protobuf bodies and POSTed by
   ``--senders`` keep-alive connections from a forked process. Event times:
   ``backfill``: spread over one hour ending an hour ago, every body touching all sixty
   minutes (a backfill, a replay, late retries); ``current``: the last minute or two of
   wall time, each body one or two minutes (a fleet sending as it runs). A 200 means the
   spans are committed, so spans / (first send -> last 200) is the durable rate.
3. While it runs, every 0.25 s: CPU seconds of each process (``up``, ingest and its
   normalizer workers, the analytics worker and its children, the dashboard, the
   senders, every PostgreSQL process by role: ``application_name``, which each service
   sets as ``tpmledger-<service>``, else the backend type) and the active statements of
   ``pg_stat_activity`` by class (sampled database time; ``pg_stat_statements`` is used
   instead when the server has it loaded), and how long each process waited for a core
   (Linux ``/proc/PID/task/*/schedstat``: runnable, not running). Ingest's ``/metrics``
   before and after the burst give the group commits (how many, requests per commit, wall
   time each): with the CPU, how busy each stage of the pipeline was.
4. After the last 200: how long until the live minute table holds every span (the live
   path's catch-up after the burst) and a digest of the live figures (the same spans give
   the same digest: figures unchanged by a change of the live path).
5. ``up`` is stopped; the same bodies are normalized and COPY-encoded (untimed) and one
   COPY of all rows into the emptied ``attempts`` table is timed: the raw ceiling of the
   same run. durable / raw is the ratio (target >= 0.5).

``--cpu-load N`` runs N busy-looping processes beside everything (a loaded machine).
``--trials N`` repeats steps 1-5 N times and adds the best durable rate against the best
raw COPY (the issue's procedure: best of two trials on each side; a shared machine's speed
moves by more than the figure).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ingest_workload as workload
from ingest_alone import raw_copy, start_profiler

from tpmledger.ingest.normalize_pool import default_workers
from tpmledger.storage.server.database import libpq_url

RESULTS = workload.REPO / "bench" / "results" / "ingest_up.txt"
HOUR_NS = 3600 * 1_000_000_000
MINUTE_NS = 60 * 1_000_000_000
# Event times of the backfill shape: a fixed hour, so two runs give the same digest.
BACKFILL_BASE_NS = 1_790_000_000 * 1_000_000_000


def spread_bodies(bodies: list[bytes], base_ns: int, width_ns: int) -> list[bytes]:
    """The same bodies with span start times interleaved over ``width_ns``: span k of body
    b starts at slot k × len(bodies) + b, so every body reaches across the whole width."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    total = sum(
        len(ExportTraceServiceRequest.FromString(b).resource_spans[0].scope_spans[0].spans)
        for b in bodies[:1]
    ) * len(bodies)
    step = width_ns // max(total, 1)
    out = []
    for b, body in enumerate(bodies):
        request = ExportTraceServiceRequest.FromString(body)
        for k, span in enumerate(request.resource_spans[0].scope_spans[0].spans):
            duration = span.end_time_unix_nano - span.start_time_unix_nano
            span.start_time_unix_nano = base_ns + (k * len(bodies) + b) * step
            span.end_time_unix_nano = span.start_time_unix_nano + duration
        out.append(request.SerializeToString())
    return out


def build(shape: str, spans: int, batch: int) -> list[bytes]:
    if shape == "backfill":
        bodies = workload.build_bodies(spans, batch, run_id="bench_up_backfill")
        return spread_bodies(bodies, BACKFILL_BASE_NS, HOUR_NS)
    # Current traffic: consecutive spans ~67 µs apart from a minute ago (the rate a busy
    # fleet sends at), so each body covers a second of the newest minute or two.
    return workload.build_bodies(
        spans, batch, run_id="bench_up_current", base_ns=time.time_ns() - MINUTE_NS,
        step_ns=66_667,
    )  # fmt: skip


# -- processes and their CPU -----------------------------------------------------------


def _service_of(process: psutil.Process) -> str | None:
    with contextlib.suppress(psutil.Error):
        command = process.cmdline()
        if "serve" in command:
            return command[command.index("serve") + 1]
    return None


def service_processes(up: psutil.Process) -> dict[str, list[psutil.Process]]:
    """``up``'s processes by role: each service with its own children under its name."""
    roles: dict[str, list[psutil.Process]] = {"up": [up]}
    with contextlib.suppress(psutil.Error):
        for child in up.children():
            name = _service_of(child) or "other"
            roles.setdefault(name, []).append(child)
            for grandchild in child.children(recursive=True):
                label = "ingest normalizer workers" if name == "ingest" else f"{name} children"
                roles.setdefault(label, []).append(grandchild)
    return roles


def _cpu(process: psutil.Process) -> float | None:
    try:
        times = process.cpu_times()
    except psutil.Error:
        return None
    return float(times.user + times.system)


def _waited(pid: int) -> float | None:
    """Seconds the process's threads spent runnable but waiting for a core (Linux
    ``/proc/PID/task/*/schedstat``), or None where that is not available."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, IndexError, ValueError):
                total += int((task / "schedstat").read_text().split()[1])
    except OSError:
        return None
    return total / 1e9


@dataclass
class CpuLedger:
    """CPU seconds per role between :meth:`mark` calls: per pid, the first and the last
    value seen (a process started during the window counts from zero)."""

    first: dict[int, float] = field(default_factory=dict)
    last: dict[int, float] = field(default_factory=dict)
    role: dict[int, str] = field(default_factory=dict)
    # The same for the seconds spent waiting for a core (run queue), where known.
    wait_first: dict[int, float] = field(default_factory=dict)
    wait_last: dict[int, float] = field(default_factory=dict)

    def see(self, pid: int, role: str, cpu: float | None, *, new: bool) -> None:
        if cpu is None:
            return
        if pid not in self.first:
            self.first[pid] = 0.0 if new else cpu
        self.last[pid] = cpu
        self.role[pid] = role
        waited = _waited(pid)
        if waited is not None:
            if pid not in self.wait_first:
                self.wait_first[pid] = 0.0 if new else waited
            self.wait_last[pid] = waited

    def waits_by_role(self) -> dict[str, float]:
        """Seconds each role's processes were runnable but waited for a core."""
        return self._sum_by_role(self.wait_first, self.wait_last)

    def by_role(self) -> dict[str, float]:
        """CPU seconds each role's processes used."""
        return self._sum_by_role(self.first, self.last)

    def _sum_by_role(self, first: dict[int, float], last: dict[int, float]) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, value in last.items():
            role = self.role[pid]
            out[role] = out.get(role, 0.0) + value - first[pid]
        return out


STATEMENT_CLASSES = (
    ("COPY attempts (ingest commits)", r"^\s*COPY\s+attempts"),
    ("COPY live_minutes", r"^\s*COPY\s+live_minutes"),
    ("live marks (live_dirty)", r"live_dirty"),
    ("live batch summaries", r"live_batches|ingest_batches"),
    ("live rows written", r"^\s*(INSERT INTO|DELETE FROM) (live_|minute_extras)"),
    # The new commits' rows with their flags (storage/readers/commit_rows.py): one statement.
    ("attempt reads for live", r"WITH new AS (NOT )?MATERIALIZED"),
    ("flag probes (dependents, later, rollup)", r"has_later|later_in_call|rollup|parent_span"),
    ("attempt reads for live", r"FROM attempts"),
    ("tool spans", r"tool_spans"),
    ("snapshots / seals", r"snapshot|seal|minute_leaves"),
    ("runs table", r"\bruns\b"),
    ("COMMIT", r"^\s*COMMIT"),
)


def statement_class(query: str) -> str:
    for label, pattern in STATEMENT_CLASSES:
        if re.search(pattern, query, re.IGNORECASE):
            return label
    return "other: " + " ".join(query.split())[:50]


class Sampler(threading.Thread):
    """Every ``interval`` s: CPU of every process, and pg_stat_activity's active statements."""

    def __init__(self, url: str, up: psutil.Process, interval: float = 0.25):
        super().__init__(daemon=True)
        self.url, self.up, self.interval = url, up, interval
        self.hogs: set[int] = set()
        self.ledger = CpuLedger()
        self.statement_s: dict[tuple[str, str], float] = {}
        self.samples = 0
        #: The largest resident set each service role held at one sample (its processes
        #: summed), the burst and the catch-up together; PostgreSQL's backends share memory,
        #: so they are left out.
        self.peak_rss: dict[str, int] = {}
        self._stop_event = threading.Event()
        self._lock = threading.Lock()
        self._primed = False

    def run(self) -> None:
        with psycopg.connect(libpq_url(self.url), autocommit=True) as conn:
            conn.execute("SET application_name = 'bench-sampler'")
            mine = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
            while not self._stop_event.is_set():
                self._sample(conn, mine)
                self._primed = True
                self._stop_event.wait(self.interval)

    def _sample(self, conn: psycopg.Connection, mine: int) -> None:
        rows = conn.execute(
            "SELECT pid, coalesce(nullif(application_name, ''), backend_type), state, "
            "coalesce(query, '') FROM pg_stat_activity WHERE pid <> %s",
            (mine,),
        ).fetchall()
        new = self._primed
        with self._lock:
            self.samples += 1
            for pid, app, state, query in rows:
                role = f"PostgreSQL: {app}"
                with contextlib.suppress(psutil.Error):
                    self.ledger.see(pid, role, _cpu(psutil.Process(pid)), new=new)
                if state == "active":
                    key = (app, statement_class(query))
                    self.statement_s[key] = self.statement_s.get(key, 0.0) + self.interval
            for role, processes in service_processes(self.up).items():
                resident = 0
                for process in processes:
                    self.ledger.see(process.pid, role, _cpu(process), new=new)
                    with contextlib.suppress(psutil.Error):
                        resident += process.memory_info().rss
                self.peak_rss[role] = max(self.peak_rss.get(role, 0), resident)
            for child in psutil.Process().children():  # the forked senders, the busy loops
                role = "competing busy loops" if child.pid in self.hogs else "senders (bench)"
                if "py-spy" in child.name():
                    role = "profiler (bench)"
                self.ledger.see(child.pid, role, _cpu(child), new=new)

    def window(self) -> tuple[CpuLedger, dict[tuple[str, str], float]]:
        """Restart the counts; returns those of the window that ends now."""
        with self._lock:
            ledger, statements = self.ledger, self.statement_s
            self.ledger = CpuLedger(
                first=dict(ledger.last),
                last=dict(ledger.last),
                role=dict(ledger.role),
                wait_first=dict(ledger.wait_last),
                wait_last=dict(ledger.wait_last),
            )
            self.statement_s = {}
        return ledger, statements

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


def pg_stat_statements(url: str) -> list[tuple[float, int, str]] | None:
    """(total ms, calls, query) of the server's statements, or None without the extension."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        loaded = conn.execute("SHOW shared_preload_libraries").fetchone()
        if not loaded or "pg_stat_statements" not in str(loaded[0]):
            return None
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        rows = conn.execute(
            "SELECT total_exec_time, calls, query FROM pg_stat_statements "
            "ORDER BY total_exec_time DESC LIMIT 40"
        ).fetchall()
    return [(float(t), int(c), str(q)) for t, c, q in rows]


# -- up ----------------------------------------------------------------------------------


@dataclass
class Up:
    process: subprocess.Popen[bytes]
    port: int
    data_dir: Path
    log_path: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        # Its log and (cold runs) kernel cache: every run left one behind in the temp dir.
        shutil.rmtree(self.data_dir, ignore_errors=True)


def start_up(url: str, *, cold: bool = False) -> Up:
    data_dir = Path(tempfile.mkdtemp(prefix="bench-up-data-"))
    port, grpc, dash = workload.free_port(), workload.free_port(), workload.free_port()
    log_path = data_dir / "up.log"
    command = [sys.executable, "-m", "tpmledger.cli.main", "up", "--data-dir", str(data_dir)]
    command += ["--http-port", str(port), "--grpc-port", str(grpc), "--dashboard-port", str(dash)]
    # The quiet-run reseal (10 s after the last span by default) would drop the live rows
    # the bench counts and digests: deferred past the bench. Checkpoints stay on.
    env = {**os.environ, "TPMLEDGER_DATABASE_URL": url, "TPMLEDGER_RESEAL_QUIET_S": "3600"}
    if cold:  # a fresh install: no compiled kernel cached yet
        env["NUMBA_CACHE_DIR"] = str(data_dir / "numba-cache")
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    up = Up(process, port, data_dir, log_path)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"up exited:\n{log_path.read_text()}")
        with contextlib.suppress(OSError):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                return up
        time.sleep(0.3)
    up.stop()
    raise TimeoutError(f"up not ready:\n{log_path.read_text()}")


def wait_idle(up: psutil.Process, role: str, quiet_s: float = 3.0, limit_s: float = 300) -> float:
    """Wait until ``role``'s processes used under 5 % CPU for ``quiet_s``; seconds waited."""
    started = time.monotonic()
    quiet_since = None
    previous = None
    while time.monotonic() - started < limit_s:
        total = sum(
            _cpu(p) or 0.0
            for name, ps in service_processes(up).items()
            if name.startswith(role)
            for p in ps
        )
        now = time.monotonic()
        if previous is not None and total - previous[0] < 0.05 * (now - previous[1]):
            quiet_since = quiet_since or previous[1]
            if now - quiet_since >= quiet_s:
                break
        else:
            quiet_since = None
        previous = (total, now)
        time.sleep(0.5)
    return time.monotonic() - started


# -- live figures ----------------------------------------------------------------------


def live_calls(url: str, run_id: str) -> tuple[int, int]:
    """(attempts the live table counts for the run, marks still queued)."""
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(attempts), 0) FROM live_run_minutes WHERE run_id = %s",
            (run_id,),
        ).fetchone()
        marks = conn.execute("SELECT count(*) FROM live_dirty WHERE run_id = %s", (run_id,))
        queued = marks.fetchone()
    return int(row[0]) if row else 0, int(queued[0]) if queued else 0


def live_digest(url: str, run_id: str) -> str:
    """sha256 of the run's live rows, run facts and extras (times of computation left out)."""
    digest = hashlib.sha256()
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        for table, order in (
            ("live_minutes", "minute_utc, shard_id"),
            ("live_run_minutes", "minute_utc"),
            ("minute_extras", "1, 2, 3, 4"),
        ):
            columns = [
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                    "AND column_name NOT IN ('computed_at', 'data_as_of', 'run_id') "
                    "ORDER BY ordinal_position",
                    (table,),
                ).fetchall()
            ]
            query = f"SELECT {', '.join(columns)} FROM {table} WHERE run_id = %s ORDER BY {order}"
            for row in conn.execute(query, (run_id,)):  # type: ignore[call-overload]
                digest.update(repr(row).encode())
    return digest.hexdigest()[:16]


def summarize_live_profile(path: Path, top: int = 25) -> list[str]:
    """Where py-spy's samples of the analytics worker's live thread landed (inclusive)."""
    inclusive: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        frames = stack.split(";")
        thread = [i for i, f in enumerate(frames) if f.startswith("thread (")]
        if not samples.isdigit() or not thread or "live-minutes" not in frames[thread[0]]:
            continue
        count = int(samples)
        total += count
        names = set()
        for frame in frames[thread[0] + 1 :]:
            name, _, where = frame.partition(" (")
            names.add(f"{name} ({where.split(':')[0].rsplit('/', 1)[-1]})")
        for name in names:
            inclusive[name] = inclusive.get(name, 0) + count
    lines = [f"profile: {total} py-spy samples of the live thread (inclusive, top {top})"]
    for name, n in sorted(inclusive.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {100 * n / max(total, 1):5.1f}%  {name}")
    return lines


class FirstFigures(threading.Thread):
    """Seconds from :meth:`start` until the run has its first live row (polled)."""

    def __init__(self, url: str, run_id: str) -> None:
        super().__init__(daemon=True)
        self.url, self.run_id = url, run_id
        self.started = 0.0
        self.seconds: float | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        self.started = time.perf_counter()
        try:
            self._poll()
        except Exception as exc:  # said, not swallowed: the figure is then "not seen"
            print(f"first-figures probe failed: {exc!r}", file=sys.stderr, flush=True)

    def _poll(self) -> None:
        # One more look after stop(): a run caught up between two polls was reported "not
        # seen" (the figure is then an upper bound: the moment stop() came).
        with psycopg.connect(libpq_url(self.url), autocommit=True) as conn:
            while True:
                stopping = self._stop_event.is_set()
                row = conn.execute(
                    "SELECT 1 FROM live_run_minutes WHERE run_id = %s LIMIT 1", (self.run_id,)
                ).fetchone()
                if row:
                    self.seconds = time.perf_counter() - self.started
                    return
                if stopping:
                    return
                self._stop_event.wait(0.1)

    def stop(self) -> float | None:
        self._stop_event.set()
        self.join()
        return self.seconds


def busy_loop() -> None:
    while True:
        pass


# -- report ------------------------------------------------------------------------------


_COMMIT_SERIES = {
    "tpmledger_ingest_commit_latency_seconds_sum": "commit_s",
    "tpmledger_ingest_commit_latency_seconds_count": "commits",
    "tpmledger_ingest_commit_group_requests_sum": "grouped",
}


def commit_stats(port: int) -> dict[str, float]:
    """Ingest's group-commit histograms as its ``/metrics`` shows them now (sums, counts)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    out = dict.fromkeys(_COMMIT_SERIES.values(), 0.0)
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in _COMMIT_SERIES:
            out[_COMMIT_SERIES[name]] += float(value)
    return out


def _normalizer_workers() -> int:
    """The normalizer processes up starts: ``TPMLEDGER_NORMALIZE_WORKERS`` when set (the
    bench passes its environment on), else the pool's default."""
    configured = os.environ.get("TPMLEDGER_NORMALIZE_WORKERS", "").strip()
    return int(configured) if configured else default_workers()


def describe_pipeline(
    wall_s: float,
    spans: int,
    requests: int,
    senders: int,
    commits: dict[str, float],
    ledger: CpuLedger,
) -> list[str]:
    """Where a request's wall time goes during the burst: how busy each stage was."""
    cpu = ledger.by_role()
    cores = os.cpu_count() or 1
    workers = max(1, _normalizer_workers())  # 0: inline, in the ingest process
    latency = senders * wall_s / max(requests, 1)  # Little's law: senders always busy
    n = max(commits["commits"], 1)
    normalizers = cpu.get("ingest normalizer workers", 0) / workers / wall_s
    ingest = cpu.get("ingest", 0) / wall_s
    backend = cpu.get("PostgreSQL: tpmledger-ingest", 0) / wall_s
    live = (cpu.get("analytics", 0) + cpu.get("PostgreSQL: tpmledger-live", 0)) / wall_s
    return [
        "pipeline during the burst (busy = share of the burst's wall time):",
        f"  request: {latency * 1e3:.0f} ms from send to 200 on average "
        f"({senders} senders, {requests} requests)",
        f"  normalizer workers: {workers}, each busy {normalizers:.0%}",
        f"  ingest process (HTTP, hand-over, group commit): busy {ingest:.0%} of one core",
        f"  group commit: {commits['commits']:.0f} commits of {commits['grouped'] / n:.1f} "
        f"requests ({spans / n:,.0f} spans), {commits['commit_s'] / n * 1e3:.0f} ms each; "
        f"the one writer connection busy {commits['commit_s'] / wall_s:.0%}",
        f"  PostgreSQL ingest backend: busy {backend:.0%}; live path (worker + its backend): "
        f"{live:.0%} of one core",
        f"  all processes: {sum(cpu.values()) / wall_s / cores:.0%} of the {cores} cores",
    ]


def describe_window(
    title: str, seconds: float, spans: int, ledger: CpuLedger, statements: dict
) -> list[str]:
    lines = [f"{title} ({seconds:.1f} s wall):"]
    roles = sorted(ledger.by_role().items(), key=lambda kv: -kv[1])
    total = sum(v for _, v in roles)
    lines.append(
        f"  CPU seconds, all processes: {total:.1f} ({total / max(spans, 1) * 1e6:.1f} µs/span)"
    )
    waits = ledger.waits_by_role()
    for role, cpu in roles:
        if cpu >= 0.05:
            waited = f"   (+ {waits[role]:5.2f} s waiting for a core)" if role in waits else ""
            lines.append(f"    {cpu:7.2f} s  {role}{waited}")
    if statements:
        lines.append("  database time by statement class (sampled active backends, seconds):")
        for (app, label), s in sorted(statements.items(), key=lambda kv: -kv[1])[:14]:
            lines.append(f"    {s:7.2f} s  {app}: {label}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=204_800)
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--shape", choices=("backfill", "current"), default="backfill")
    parser.add_argument("--cpu-load", type=int, default=0, help="busy-looping processes beside")
    parser.add_argument("--catch-up-limit", type=float, default=300.0)
    parser.add_argument(
        "--cold",
        action="store_true",
        help="an empty kernel cache for up (a fresh install), and send as soon as ingest is "
        "ready instead of waiting for the analytics worker to go idle",
    )
    parser.add_argument(
        "--profile", action="store_true", help="py-spy the analytics worker (burst + catch-up)"
    )
    parser.add_argument(
        "--trials", type=int, default=1, help="repeat; the best of each side gives the ratio"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    trials = [_trial(args) for _ in range(args.trials)]
    if args.trials > 1:
        # The procedure: the best of the trials on each side.
        best_durable = max(range(args.trials), key=lambda i: trials[i].durable)
        best_raw = max(range(args.trials), key=lambda i: trials[i].raw)
        durable, raw = trials[best_durable].durable, trials[best_raw].raw
        summary = (
            f"best of {args.trials} trials ({args.shape}, {args.spans} spans): durable through "
            f"up {durable:,.0f} spans/s (trial {best_durable + 1}), raw COPY {raw:,.0f} rows/s "
            f"(trial {best_raw + 1}): ratio {durable / raw:.2f}; trials: "
            + ", ".join(f"{t.durable / t.raw:.2f}" for t in trials)
            + "\n"
        )
        print(summary, end="")
        with args.out.open("a") as out:
            out.write(summary + "\n")
    return 0 if all(t.complete for t in trials) else 1


@dataclass
class Trial:
    durable: float  # spans/s
    raw: float  # rows/s
    complete: bool


def _trial(args: argparse.Namespace) -> Trial:
    """One trial: a fresh database and ``up``, the burst, the raw COPY; printed and
    appended to ``args.out``."""
    run_id = f"bench_up_{args.shape}"

    t0 = time.perf_counter()
    bodies = build(args.shape, args.spans, args.batch)
    print(f"built {len(bodies)} bodies in {time.perf_counter() - t0:.1f} s", flush=True)
    load_before = os.getloadavg()
    lines: list[str] = []
    hogs: list[multiprocessing.Process] = []
    with workload.fresh_database() as db:
        up = start_up(db.url, cold=args.cold)
        try:
            up_ps = psutil.Process(up.process.pid)
            warm = 0.0 if args.cold else wait_idle(up_ps, "analytics")
            print(f"up ready; analytics idle after {warm:.1f} s", flush=True)
            for _ in range(args.cpu_load):
                hog = multiprocessing.Process(target=busy_loop, daemon=True)
                hog.start()
                hogs.append(hog)
            if args.shape == "current":  # event times relative to now: built just before
                bodies = build(args.shape, args.spans, args.batch)
            profiler = None
            if args.profile:
                analytics = service_processes(up_ps)["analytics"][0]
                profiler = start_profiler(analytics.pid, args.catch_up_limit + 600)
            sampler = Sampler(db.url, up_ps)
            sampler.hogs = {hog.pid for hog in hogs if hog.pid is not None}
            sampler.start()
            time.sleep(0.6)
            sampler.window()
            first = FirstFigures(db.url, run_id)
            first.start()
            commits_before = commit_stats(up.port)
            sent = workload.send_in_child_process("127.0.0.1", up.port, bodies, args.senders)
            burst_end = time.perf_counter()
            send_ledger, send_statements = sampler.window()
            commits = commit_stats(up.port)
            commits = {k: v - commits_before[k] for k, v in commits.items()}
            load_during = os.getloadavg()
            counted, queued = 0, -1
            while time.perf_counter() - burst_end < args.catch_up_limit:
                counted, queued = live_calls(db.url, run_id)
                if counted >= args.spans and queued == 0:
                    break
                time.sleep(0.2)
            caught_up = time.perf_counter() - burst_end
            first_figures = first.stop()
            catch_ledger, catch_statements = sampler.window()
            sampler.stop()
            peak_rss = dict(sampler.peak_rss)
            for hog in hogs:
                hog.kill()
            if profiler:
                profiler[0].send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
                profiler[0].wait()
            digest = live_digest(db.url, run_id)
            statements_ext = pg_stat_statements(db.url)
        finally:
            for hog in hogs:
                with contextlib.suppress(Exception):
                    hog.kill()
            up.stop()
        stored = workload.count_rows(db.url)
        elapsed = sent.finished - sent.started
        durable = args.spans / elapsed
        raw = raw_copy(db.url, bodies)

    complete = stored == args.spans and not sent.errors
    # What the services cost per span, burst and catch-up together (the bench's own
    # processes and busy loops left out): on idle cores that bounds the durable rate.
    services = {**send_ledger.by_role()}
    for role, cpu in catch_ledger.by_role().items():
        services[role] = services.get(role, 0.0) + cpu
    service_us = (
        sum(cpu for role, cpu in services.items() if "(bench)" not in role and "busy" not in role)
        / args.spans
        * 1e6
    )
    projected = (os.cpu_count() or 1) * 1e6 / service_us if service_us else None
    raw_projected = 1e6 / raw.pg_us if raw.pg_us else None
    lines += [
        f"tpmledger ingest through `up` — {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}",
        f"machine: {os.cpu_count()} cpus; load average before {load_before[0]:.1f}, at end of "
        f"load {load_during[0]:.1f} (other work shares the cores); competing busy loops: "
        f"{args.cpu_load}",
        f"command: .venv/bin/python bench/ingest_up.py --spans {args.spans} --senders "
        f"{args.senders} --batch {args.batch} --shape {args.shape}"
        + (f" --cpu-load {args.cpu_load}" if args.cpu_load else "")
        + (" --cold" if args.cold else ""),
        f"shape: {args.shape} ("
        + (
            "event times over one hour, every body touching all 60 minutes"
            if args.shape == "backfill"
            else "event times of the last minute or two, each body ~1 s of them"
        )
        + ")",
        f"HTTP statuses: {dict(sorted(sent.statuses.items()))}; sender errors: {len(sent.errors)}",
        f"rows stored: {stored} of {args.spans} ({'complete' if complete else 'INCOMPLETE'})",
        f"durable through up: {durable:,.0f} spans/s ({elapsed:.2f} s first send -> last 200)",
        f"raw COPY of the same {raw.rows} rows, same run: {raw.spans_per_s:,.0f} rows/s",
        f"ratio durable/raw: {durable / raw.spans_per_s:.2f} (target >= 0.5, aim 0.8)",
        f"CPU per span, every service and its PostgreSQL backends, burst + live catch-up: "
        f"{service_us:.1f} µs; raw COPY's backend: "
        + ("not measured" if raw.pg_us is None else f"{raw.pg_us:.1f} µs")
        + (
            f"\n  => on {os.cpu_count()} idle cores: durable through up ~{projected:,.0f} "
            f"spans/s, raw COPY ~{raw_projected:,.0f}: CPU-projected ratio "
            f"{projected / raw_projected:.2f}"
            if projected and raw_projected
            else ""
        ),
        f"live table after the burst: {counted} of {args.spans} attempts, {queued} marks queued, "
        f"{caught_up:.1f} s after the last 200"
        + (" (caught up)" if counted >= args.spans and queued == 0 else " (NOT caught up)"),
        "first live figures of the run: "
        + ("not seen" if first_figures is None else f"{first_figures:.1f} s after the first send")
        + (" (cold start: empty kernel cache, sent as soon as ingest was ready)"
           if args.cold else ""),
        f"live figures digest: {digest}",
        "peak RSS by service (sampled every 0.25 s, its processes summed): "
        + ", ".join(f"{role} {rss / 2**20:,.0f} MiB" for role, rss in sorted(peak_rss.items())),
        *describe_window("during the burst", elapsed, args.spans, send_ledger, send_statements),
        *describe_pipeline(elapsed, args.spans, len(bodies), args.senders, commits, send_ledger),
        *describe_window("after the burst, until live caught up", caught_up, args.spans,
                         catch_ledger, catch_statements),
    ]  # fmt: skip
    if statements_ext:
        lines.append("pg_stat_statements, top by total time:")
        lines += [f"  {t / 1000:7.2f} s  {c:6d} calls  {' '.join(q.split())[:80]}"
                  for t, c, q in statements_ext[:12]]  # fmt: skip
    else:
        lines.append("(pg_stat_statements not loaded on this server: statement times are sampled)")
    if profiler:
        lines += summarize_live_profile(profiler[1])
    text = "\n".join(lines) + "\n"
    print(text, end="")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as out:
        out.write(text + "\n")
    return Trial(durable, raw.spans_per_s, complete)


if __name__ == "__main__":
    sys.exit(main())
