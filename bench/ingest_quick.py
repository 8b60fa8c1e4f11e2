"""Quick durable-throughput figure of ONE ingest process (issue 2 note; README.md#benchmarks
target).

Starts PostgreSQL (embedded pgserver in a temp dir, or ``--admin-url``), a fresh migrated
database, and ``tpmledger serve ingest`` as a subprocess; then 8 concurrent senders post
pre-encoded 512-span protobuf batches to ``POST /v1/traces``. A span counts only when its
request was answered 200 (= committed); the count in PostgreSQL is checked at the end.

    .venv/bin/python bench/ingest_quick.py [--spans 200000] [--senders 8] [--batch 512]

Prints spans/s and request latency; this is a measurement, not a test.
"""

from __future__ import annotations

import argparse
import os
import queue
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psycopg
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from sqlalchemy.engine import make_url

from tpmledger.storage.server import migrate
from tpmledger.storage.server.database import get_engine, libpq_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository, for tests/

from tests.otlp_values import key_value


def build_batch(shard: int, size: int, rng: random.Random) -> bytes:
    """One 512-span request shaped like a shard worker's export (GenAI semconv keys)."""
    now = time.time_ns()
    resource = Resource(
        attributes=[
            key_value("service.name", "bench-worker"),
            key_value("tpmledger.run.id", "bench_run"),
            key_value("tpmledger.shard.id", str(shard)),
            key_value("tpmledger.shard.count", 8),
            key_value("tpmledger.concurrency.cap", 16),
        ]
    )
    spans = []
    for _ in range(size):
        start = now - rng.randrange(1, 3_000_000_000_000)
        spans.append(
            Span(
                trace_id=rng.randbytes(16),
                span_id=rng.randbytes(8),
                name="chat gpt-bench",
                kind=Span.SPAN_KIND_CLIENT,
                start_time_unix_nano=start,
                end_time_unix_nano=start + rng.randrange(200_000_000, 20_000_000_000),
                attributes=[
                    key_value("gen_ai.operation.name", "chat"),
                    key_value("gen_ai.provider.name", "openai"),
                    key_value("gen_ai.request.model", "gpt-bench"),
                    key_value("gen_ai.response.model", "gpt-bench-2026"),
                    key_value("gen_ai.usage.input_tokens", rng.randrange(10, 4000)),
                    key_value("gen_ai.usage.output_tokens", rng.randrange(1, 1000)),
                    key_value("gen_ai.response.time_to_first_chunk", rng.random()),
                    key_value("tpmledger.queue.wait_s", rng.random() / 10),
                    key_value("tpmledger.call.id", rng.randbytes(8).hex()),
                    key_value("http.response.status_code", 200),
                ],
            )
        )
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=spans)])]
    )
    return request.SerializeToString()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fresh_database(admin_url: str) -> str:
    name = f"bench_{os.getpid()}_{int(time.time())}"
    with psycopg.connect(libpq_url(admin_url), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    migrate.upgrade(url)
    get_engine(url).dispose()
    return url


def start_ingest(url: str) -> tuple[subprocess.Popen[bytes], str]:
    port, grpc_port = free_port(), free_port()
    env = {**os.environ, "TPMLEDGER_DATABASE_URL": url}
    cmd = [sys.executable, "-m", "tpmledger.cli.main", "serve", "ingest"]
    proc = subprocess.Popen(
        [*cmd, "--http-port", str(port), "--grpc-port", str(grpc_port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError("ingest exited during start-up")
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("ingest not ready in 120 s")


def send_all(base: str, bodies: list[bytes], senders: int, batch: int) -> dict[str, float]:
    work: queue.Queue[bytes] = queue.Queue()
    for body in bodies:
        work.put(body)
    latencies: list[float] = []
    retries = [0]
    lock = threading.Lock()

    def sender() -> None:
        headers = {"Content-Type": "application/x-protobuf"}
        with httpx.Client(timeout=120) as client:
            while True:
                try:
                    body = work.get_nowait()
                except queue.Empty:
                    return
                while True:
                    t0 = time.perf_counter()
                    r = client.post(f"{base}/v1/traces", content=body, headers=headers)
                    if r.status_code == 200:
                        with lock:
                            latencies.append(time.perf_counter() - t0)
                        break
                    if r.status_code != 503:
                        raise RuntimeError(f"unexpected {r.status_code}: {r.text[:200]}")
                    with lock:
                        retries[0] += 1
                    time.sleep(float(r.headers.get("retry-after", "1")))

    threads = [threading.Thread(target=sender) for _ in range(senders)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "elapsed_s": elapsed,
        "spans_per_s": len(latencies) * batch / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
        "retries_503": retries[0],
    }


def writer_figures(metrics_text: str) -> dict[str, float]:
    """Busy time and count of group commits, from the server's own /metrics."""
    values: dict[str, float] = {}
    for line in metrics_text.splitlines():
        name, _, value = line.partition(" ")
        if name in (
            "tpmledger_ingest_commit_latency_seconds_sum",
            "tpmledger_ingest_commit_latency_seconds_count",
            "tpmledger_ingest_commit_group_requests_sum",
        ):
            values[name.removeprefix("tpmledger_ingest_")] = float(value)
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=200_000)
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
        url = fresh_database(admin_url)
        rng = random.Random(7)
        n_batches = max(1, args.spans // args.batch)
        bodies = [build_batch(i % 8, args.batch, rng) for i in range(n_batches)]
        proc, base = start_ingest(url)
        try:
            # Warm-up (connections, caches) with one batch that is counted in the DB total.
            warm = build_batch(0, args.batch, rng)
            httpx.post(
                f"{base}/v1/traces",
                content=warm,
                headers={"Content-Type": "application/x-protobuf"},
                timeout=120,
            )
            figures = send_all(base, bodies, args.senders, args.batch)
            figures.update(writer_figures(httpx.get(f"{base}/metrics", timeout=30).text))
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        with psycopg.connect(libpq_url(url)) as conn:
            row = conn.execute("SELECT count(*) FROM attempts").fetchone()
        stored = int(row[0]) if row else 0
        expected = (n_batches + 1) * args.batch
        print(
            f"ingest_quick: {args.senders} senders x {args.batch}-span protobuf batches, "
            f"{n_batches * args.batch} spans, one ingest process, {os.cpu_count()} CPUs"
        )
        print(f"durable spans/s (counted on 200 = committed): {figures['spans_per_s']:,.0f}")
        print(
            f"elapsed: {figures['elapsed_s']:.2f} s; request latency p50 "
            f"{figures['p50_ms']:.0f} ms, p99 {figures['p99_ms']:.0f} ms; "
            f"503 retries: {figures['retries_503']}"
        )
        commits = figures.get("commit_latency_seconds_count", 0.0)
        busy = figures.get("commit_latency_seconds_sum", 0.0)
        if commits:
            print(
                f"group commits: {commits:.0f}, "
                f"{figures['commit_group_requests_sum'] / commits:.1f} requests each; "
                f"writer busy {busy:.1f} s ({busy / figures['elapsed_s']:.0%} of the load's time)"
            )
        print(
            f"stored in PostgreSQL: {stored} of {expected} sent"
            f" ({'all' if stored == expected else 'MISMATCH'})"
        )
        return 0 if stored == expected else 1
    finally:
        if server is not None:
            remove_throwaway_server(server)


if __name__ == "__main__":
    sys.exit(main())
