"""Durable ingest throughput against a raw COPY of the same rows (README.md#benchmarks, issue 9).

    .venv/bin/python bench/ingest_alone.py [--spans 500000] [--senders 8] [--batch 512]
                                     [--profile] [--out bench/results/ingest.txt]

1. A fresh, migrated database (on ``TPMLEDGER_DATABASE_URL``'s server, else an embedded
   pgserver in a temp dir) and ``tpmledger serve ingest`` as a child process.
2. ``--spans`` realistic LLM spans, pre-serialized as 512-span protobuf bodies, POSTed by
   ``--senders`` keep-alive connections from a separate (forked) process. A 200 means the
   spans are committed (docs/ingest.md), so spans / (first send → last 200) is *durable* spans/s;
   the row count is then checked against the spans sent.
3. Ingest is stopped; the same bodies are normalized and COPY-encoded
   (``ingest.request_encoding.encode_request``, untimed) and
   ``storage.writers.bulk_writer.copy_blocks`` COPYs those rows into the emptied
   ``attempts`` table in one transaction. Only the COPY
   and its commit are timed: that is the raw ceiling.
4. durable / raw is the ratio README.md#benchmarks asks for (target ≥ 0.5, and ≥ 30,000 spans/s).

``--profile`` attaches ``py-spy record`` (``pip install py-spy``) to the ingest process for
the load and prints the functions where most samples landed.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ingest_workload as workload

from tpmledger.storage.server.database import libpq_url

RESULTS = workload.REPO / "bench" / "results" / "ingest.txt"


@dataclass
class RawCopy:
    """The raw COPY of the benchmark's rows: speed and CPU per row on both sides."""

    spans_per_s: float
    rows: int
    normalize_s: float
    client_us: float
    pg_us: float | None


def raw_copy(url: str, bodies: list[bytes]) -> RawCopy:
    """Normalize and encode every body (untimed), then time one COPY (+ commit) of all rows."""
    from tpmledger.ingest.request_encoding import encode_request
    from tpmledger.storage.writers.bulk_writer import copy_blocks

    t0 = time.perf_counter()
    blocks = [encode_request(body).block for body in bodies]
    rows = sum(block.rows for block in blocks)
    normalize_s = time.perf_counter() - t0
    with psycopg.connect(libpq_url(url)) as conn:
        # Same table, emptied: same indexes and primary key the durable path paid for.
        conn.execute("TRUNCATE attempts, runs")
        conn.commit()
        conn.execute("CHECKPOINT")
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        backend = row[0] if row else None
        pg_before = workload.cpu_seconds(backend)
        cpu_before = time.process_time()
        t0 = time.perf_counter()
        with conn.transaction():
            copy_blocks(conn, "attempts", blocks)
        elapsed = time.perf_counter() - t0
        client_us = (time.process_time() - cpu_before) / rows * 1e6
        pg_after = workload.cpu_seconds(backend)
    pg_us = None if pg_before is None or pg_after is None else (pg_after - pg_before)
    return RawCopy(
        rows / elapsed,
        rows,
        normalize_s,
        client_us,
        None if pg_us is None else pg_us / rows * 1e6,
    )


def cpu_snapshot(ingest_pid: int, postmaster_pid: int | None) -> tuple[float | None, ...]:
    return (
        workload.cpu_seconds(ingest_pid),
        # The ingest process and its normalizer workers (ingest.normalize_pool).
        workload.cpu_seconds(ingest_pid, with_children=True),
        workload.cpu_seconds(postmaster_pid, with_children=True),
    )


def cpu_per_span(
    before: tuple[float | None, ...], after: tuple[float | None, ...], spans: int
) -> list[float | None]:
    """CPU microseconds per span: ingest main process, ingest with workers, PostgreSQL."""
    return [
        None if a is None or b is None else (a - b) / spans * 1e6
        for b, a in zip(before, after, strict=True)
    ]


def ceiling(single_us: float | None, total_us: float | None, pg_us: float | None) -> float | None:
    """Spans/s an idle machine could reach at these CPU costs: ``single_us`` is the cost in
    the one process that cannot spread over cores (GIL), ``total_us`` the cost of all
    client-side processes; PostgreSQL's share competes for the same cores."""
    if not single_us or not total_us or not pg_us:
        return None
    cores = os.cpu_count() or 1
    return min(1e6 / single_us, cores * 1e6 / (total_us + pg_us))


def describe_cpu(cpu: list[float | None], raw: RawCopy) -> list[str]:
    """CPU per span of both paths, and the ratio the machine would give if it were idle."""
    main_us, ingest_us, pg_us = cpu
    workers_us = None if main_us is None or ingest_us is None else ingest_us - main_us
    fmt = lambda v: "not measured" if v is None else f"{v:.1f} µs"  # noqa: E731
    durable_cap = ceiling(main_us, ingest_us, pg_us)
    # One COPY stream: the client and its backend are each one process.
    raw_cap = (
        None
        if raw.pg_us is None
        else min(ceiling(raw.client_us, raw.client_us, raw.pg_us) or 0.0, 1e6 / raw.pg_us)
    )
    lines = [
        f"CPU per span, durable path: ingest {fmt(ingest_us)} (main process {fmt(main_us)}, "
        f"normalizer workers {fmt(workers_us)}), PostgreSQL {fmt(pg_us)}",
        f"CPU per span, raw COPY: client {fmt(raw.client_us)}, PostgreSQL backend {fmt(raw.pg_us)}",
    ]
    if durable_cap and raw_cap:
        lines.append(
            f"  => on {os.cpu_count()} idle cores these costs cap durable ingest at "
            f"~{durable_cap:,.0f} spans/s and raw COPY at ~{raw_cap:,.0f} spans/s: "
            f"CPU-projected ratio {durable_cap / raw_cap:.2f}"
        )
    return lines


def start_profiler(pid: int, seconds: float) -> tuple[subprocess.Popen[bytes], Path] | None:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        print("py-spy not installed: `.venv/bin/pip install py-spy`; profile skipped")
        return None
    out = Path(tempfile.mkstemp(prefix="ingest-profile-", suffix=".txt")[1])
    command = [py_spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "200"]
    command += ["--subprocesses"]  # the normalizer workers
    command += ["--duration", str(int(seconds) + 1), "--output", str(out), "--nonblocking"]
    command += ["--threads", "--gil"] if os.environ.get("PROFILE_GIL") else ["--threads"]
    log = out.with_suffix(".log").open("wb")
    return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), out


# Pipeline stages of the ingest hot path, by the function that bounds each one.
STAGES = (
    ("HTTP body read + decompress", "BodyReader.feed"),
    ("protobuf / JSON decode", "decode_request"),
    ("normalize (span -> row), workers", "normalize_payload"),
    ("COPY text encoding, workers", "encode_attempts"),
    ("worker hand-over (pickle, pipes)", "_sendback_result", "_ExecutorManagerThread.run"),
    ("group commit (writer thread)", "_write_group"),
    ("  COPY blocks (client side)", "copy_blocks"),
    ("  waiting on PostgreSQL", "Connection.wait"),
)


def _function(frame: str) -> str:
    """``name (file:line)`` without the line, so a function's lines add up."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit(':', 1)[0]})" if where else name


def summarize_profile(path: Path, top: int = 15) -> list[str]:
    """Where py-spy's samples of the ingest process landed: threads, stages, functions."""
    threads: dict[str, int] = {}
    self_counts: dict[str, int] = {}
    stage_counts = dict.fromkeys((label for label, *_ in STAGES), 0)
    total = 0
    for line in path.read_text().splitlines():
        stack, _, samples = line.rpartition(" ")
        if not samples.isdigit():
            continue
        count = int(samples)
        frames = stack.split(";")
        total += count
        thread = frames[0].split(": ", 1)[-1].rstrip("_0123456789 ")
        threads[thread] = threads.get(thread, 0) + count
        leaf = _function(frames[-1])
        self_counts[leaf] = self_counts.get(leaf, 0) + count
        names = {f.partition(" (")[0].rsplit(".", 1)[-1] for f in frames[1:]}
        names |= {f.partition(" (")[0] for f in frames[1:]}
        for label, *functions in STAGES:
            if names.intersection(functions):
                stage_counts[label] += count
    if not total:
        return ["profile: no samples"]
    pct = lambda n: f"{100 * n / total:5.1f}%"  # noqa: E731
    lines = [f"profile: {total} py-spy samples of the ingest process (idle samples not recorded)"]
    lines.append("  by thread: " + ", ".join(f"{t} {pct(n).strip()}" for t, n in threads.items()))
    lines.append("  by stage (inclusive):")
    lines += [f"    {pct(n)}  {label}" for label, n in stage_counts.items()]
    lines.append("  top functions (self):")
    for name, n in sorted(self_counts.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"    {pct(n)}  {name}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=500_000)
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--profile", action="store_true", help="py-spy the ingest process")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra environment for the ingest process, e.g. TPMLEDGER_COMMIT_MAX_SPANS=2048",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    ingest_env = dict(item.split("=", 1) for item in args.env)

    t0 = time.perf_counter()
    bodies = workload.build_bodies(args.spans, args.batch)
    print(
        f"built {len(bodies)} bodies, {sum(map(len, bodies)) / 1e6:.1f} MB protobuf, "
        f"in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    lines: list[str] = []
    load_before = os.getloadavg()
    with workload.fresh_database() as db:
        url = db.url
        ingest = workload.start_ingest(url, ingest_env)
        try:
            rss = workload.RssSampler(ingest.process.pid)
            rss.start()
            profiler = start_profiler(ingest.process.pid, 120) if args.profile else None
            cpu_before = cpu_snapshot(ingest.process.pid, db.postmaster_pid)
            sent = workload.send_in_child_process(ingest.host, ingest.port, bodies, args.senders)
            cpu_after = cpu_snapshot(ingest.process.pid, db.postmaster_pid)
            cpu = cpu_per_span(cpu_before, cpu_after, args.spans)
            peak_rss = rss.stop()
            load_during = os.getloadavg()
            if profiler:
                profiler[0].send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
                profiler[0].wait()
        finally:
            ingest.stop()
        stored = workload.count_rows(url)
        elapsed = sent.finished - sent.started
        durable = args.spans / elapsed
        raw = raw_copy(url, bodies)

    p50 = workload.percentile(sent.latencies_s, 0.50)
    p99 = workload.percentile(sent.latencies_s, 0.99)
    complete = stored == args.spans and not sent.errors
    lines += [
        f"tpmledger ingest benchmark — {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}",
        f"machine: {os.cpu_count()} cpus, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.machine()}; load average before "
        f"{load_before[0]:.1f}, at end of load {load_during[0]:.1f} (other work shares the cores)",
        f"command: .venv/bin/python bench/ingest_alone.py --spans {args.spans} "
        f"--senders {args.senders} --batch {args.batch}"
        + "".join(f" --env {item}" for item in args.env)
        + (" --profile" if args.profile else ""),
        f"load: {args.spans} spans in {len(bodies)} protobuf requests of {args.batch} spans, "
        f"{args.senders} concurrent senders (separate process, bodies pre-serialized)",
        f"sender process CPU: {sent.cpu_s / args.spans * 1e6:.1f} µs per span",
        f"HTTP statuses: {dict(sorted(sent.statuses.items()))}; 503 with Retry-After: "
        f"{sent.retry_after_503}; sender errors: {len(sent.errors)}",
        f"rows stored: {stored} of {args.spans} sent ({'complete' if complete else 'INCOMPLETE'})",
        f"durable: {durable:,.0f} spans/s ({elapsed:.2f} s from first send to last 200)",
        f"request latency: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"
        if p50 is not None and p99 is not None
        else "request latency: not measured",
        f"ingest peak RSS (process + children): {peak_rss / 2**20:.0f} MiB",
        *describe_cpu(cpu, raw),
        f"raw COPY of the same {raw.rows} normalized rows into attempts (one transaction): "
        f"{raw.spans_per_s:,.0f} spans/s (normalize alone took {raw.normalize_s:.1f} s, untimed)",
        f"ratio durable/raw: {durable / raw.spans_per_s:.2f} (target >= 0.5); "
        f"durable target >= 30,000 spans/s: {'met' if durable >= 30_000 else 'NOT met'}",
    ]
    if profiler:
        lines += summarize_profile(profiler[1])
    if sent.errors:
        lines.append(f"first sender errors: {sent.errors[:5]}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
