"""Durable ingest throughput against a raw COPY of the same rows (SPEC §7, issue 9).

    .venv/bin/python bench/ingest.py [--spans 500000] [--senders 8] [--batch 512]
                                     [--profile] [--out bench/results/ingest.txt]

1. A fresh, migrated database (on ``TPMLEDGER_DATABASE_URL``'s server, else an embedded
   pgserver in a temp dir) and ``tpmledger serve ingest`` as a child process.
2. ``--spans`` realistic LLM spans, pre-serialized as 512-span protobuf bodies, POSTed by
   ``--senders`` keep-alive connections from a separate (forked) process. A 200 means the
   spans are committed (SPEC §3), so spans / (first send → last 200) is *durable* spans/s;
   the row count is then checked against the spans sent.
3. Ingest is stopped; the same bodies go through ``ingest.normalize.normalize_request`` and
   ``storage.bulk_writer.copy_rows`` COPYs those rows into the emptied ``attempts`` table
   in one transaction. Only the COPY and its commit are timed: that is the raw ceiling.
4. durable / raw is the ratio SPEC §7 asks for (target ≥ 0.5, and ≥ 30,000 spans/s).

``--profile`` attaches ``py-spy record`` (``pip install py-spy``) to the ingest process for
the load and prints the functions where most samples landed.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ingest_workload as workload

from storage.database import libpq_url

RESULTS = workload.REPO / "bench" / "results" / "ingest.txt"


def count_rows(url: str) -> int:
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute("SELECT count(*) FROM attempts").fetchone()
    return int(row[0]) if row else 0


def raw_copy_spans_per_s(url: str, bodies: list[bytes]) -> tuple[float, int, float]:
    """Time one COPY (+ commit) of the normalized rows; returns (spans/s, rows, normalize s)."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    from ingest.normalize import normalize_request
    from storage.bulk_writer import copy_rows

    t0 = time.perf_counter()
    rows = []
    for body in bodies:
        rows.extend(normalize_request(ExportTraceServiceRequest.FromString(body)).rows)
    normalize_s = time.perf_counter() - t0
    with psycopg.connect(libpq_url(url)) as conn:
        # Same table, emptied: same indexes and primary key the durable path paid for.
        conn.execute("TRUNCATE attempts, runs")
        conn.commit()
        conn.execute("CHECKPOINT")
        t0 = time.perf_counter()
        with conn.transaction():
            copy_rows(conn, "attempts", rows)
        elapsed = time.perf_counter() - t0
    return len(rows) / elapsed, len(rows), normalize_s


def start_profiler(pid: int, seconds: float) -> tuple[subprocess.Popen[bytes], Path] | None:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        print("py-spy not installed: `.venv/bin/pip install py-spy`; profile skipped")
        return None
    out = Path(tempfile.mkstemp(prefix="ingest-profile-", suffix=".txt")[1])
    command = [py_spy, "record", "--pid", str(pid), "--format", "raw", "--rate", "200"]
    command += ["--duration", str(int(seconds) + 1), "--output", str(out), "--nonblocking"]
    command += ["--threads", "--gil"] if os.environ.get("PROFILE_GIL") else ["--threads"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), out


def summarize_profile(path: Path, top: int = 25) -> list[str]:
    """Self and inclusive sample shares per function from py-spy's collapsed stacks."""
    self_counts: dict[str, int] = {}
    incl_counts: dict[str, int] = {}
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        count = int(n)
        frames = stack.split(";")
        total += count
        self_counts[frames[-1]] = self_counts.get(frames[-1], 0) + count
        for frame in set(frames[1:]):
            incl_counts[frame] = incl_counts.get(frame, 0) + count
    if not total:
        return ["profile: no samples"]
    lines = [f"profile: {total} samples (py-spy --threads; idle threads included)"]
    lines.append("  top self:")
    for frame, n in sorted(self_counts.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"    {100 * n / total:5.1f}%  {frame}")
    lines.append("  top inclusive:")
    for frame, n in sorted(incl_counts.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"    {100 * n / total:5.1f}%  {frame}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=500_000)
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--profile", action="store_true", help="py-spy the ingest process")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    t0 = time.perf_counter()
    bodies = workload.build_bodies(args.spans, args.batch)
    print(
        f"built {len(bodies)} bodies, {sum(map(len, bodies)) / 1e6:.1f} MB protobuf, "
        f"in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    lines: list[str] = []
    with workload.fresh_database() as url:
        ingest = workload.start_ingest(url)
        try:
            rss = workload.RssSampler(ingest.process.pid)
            rss.start()
            profiler = start_profiler(ingest.process.pid, 120) if args.profile else None
            sent = workload.send_in_child_process(ingest.host, ingest.port, bodies, args.senders)
            peak_rss = rss.stop()
            if profiler:
                profiler[0].terminate()
                profiler[0].wait()
        finally:
            ingest.stop()
        stored = count_rows(url)
        elapsed = sent.finished - sent.started
        durable = args.spans / elapsed
        raw, raw_rows, normalize_s = raw_copy_spans_per_s(url, bodies)

    p50 = workload.percentile(sent.latencies_s, 0.50)
    p99 = workload.percentile(sent.latencies_s, 0.99)
    complete = stored == args.spans and not sent.errors
    lines += [
        f"tpmledger ingest benchmark — {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}",
        f"machine: {os.cpu_count()} cpus, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.machine()}",
        f"command: .venv/bin/python bench/ingest.py --spans {args.spans} "
        f"--senders {args.senders} --batch {args.batch}" + (" --profile" if args.profile else ""),
        f"load: {args.spans} spans in {len(bodies)} protobuf requests of {args.batch} spans, "
        f"{args.senders} concurrent senders (separate process, bodies pre-serialized)",
        f"HTTP statuses: {dict(sorted(sent.statuses.items()))}; 503 with Retry-After: "
        f"{sent.retry_after_503}; sender errors: {len(sent.errors)}",
        f"rows stored: {stored} of {args.spans} sent ({'complete' if complete else 'INCOMPLETE'})",
        f"durable: {durable:,.0f} spans/s ({elapsed:.2f} s from first send to last 200)",
        f"request latency: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"
        if p50 is not None and p99 is not None
        else "request latency: not measured",
        f"ingest peak RSS (process + children): {peak_rss / 2**20:.0f} MiB",
        f"raw COPY of the same {raw_rows} normalized rows into attempts (one transaction): "
        f"{raw:,.0f} spans/s (normalize alone took {normalize_s:.1f} s, not timed)",
        f"ratio durable/raw: {durable / raw:.2f} (target >= 0.5); "
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
