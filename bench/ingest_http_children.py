"""Durable ingest throughput on spans with HTTP client children, as a ratio to spans
without (docs/conventions.md#attempts).

Same set-up as bench/ingest_quick.py (one ingest process, 8 senders, 512-span protobuf
batches, embedded PostgreSQL or ``--admin-url``), two workloads of the same span count,
alternated on fresh databases:

- ``llm``: LLM-call spans only (GenAI semconv keys, as ingest_quick sends);
- ``http``: each LLM span followed by 1-3 HTTP client child spans (the httpx
  instrumentation's attributes, new HTTP semconv, captured ``x-ratelimit-*`` headers as
  underscore keys with string-array values; the first 0-2 answered 429): 2 children per
  call on average, so two thirds of the spans are children.

    .venv/bin/python bench/ingest_http_children.py [--spans 100000] [--rounds 2]

Prints spans/s of each workload and the ratio http / llm (with ``--seal``, also the time
of a whole seal of each run: the cost of resolving HTTP attempts at read time); a
measurement, not a test.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psycopg
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

_ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT / "bench"]
sys.path.insert(0, str(_ROOT))

from tests.otlp_values import key_value  # noqa: E402
from tpmledger.storage.server.database import libpq_url  # noqa: E402

_spec = importlib.util.spec_from_file_location("ingest_quick", _ROOT / "bench" / "ingest_quick.py")
assert _spec is not None and _spec.loader is not None
quick = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(quick)

H = "http.response.header."


def _children(rng: random.Random, trace: bytes, parent: bytes, start: int, end: int) -> list[Span]:
    count = rng.choice((1, 2, 3))
    spans = []
    step = (end - start) // count
    for i in range(count):
        status = 200 if i == count - 1 else 429
        spans.append(
            Span(
                trace_id=trace,
                span_id=rng.randbytes(8),
                parent_span_id=parent,
                name="POST",
                kind=Span.SPAN_KIND_CLIENT,
                start_time_unix_nano=start + i * step,
                end_time_unix_nano=start + (i + 1) * step - 1,
                attributes=[
                    key_value("http.request.method", "POST"),
                    key_value("url.full", "https://api.openai.com/v1/chat/completions"),
                    key_value("server.address", "api.openai.com"),
                    key_value("server.port", 443),
                    key_value("network.protocol.version", "1.1"),
                    key_value("http.response.status_code", status),
                    *([key_value("error.type", "429")] if status == 429 else []),
                    key_value(H + "x_ratelimit_limit_tokens", ["150000"]),
                    key_value(H + "x_ratelimit_remaining_tokens", [str(rng.randrange(150000))]),
                    key_value(H + "x_ratelimit_limit_requests", ["500"]),
                    key_value(H + "x_ratelimit_remaining_requests", [str(rng.randrange(500))]),
                ],
            )
        )
    return spans


def build_http_batch(shard: int, size: int, rng: random.Random) -> bytes:
    """``size`` spans: LLM spans each followed by its HTTP client children."""
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
    spans: list[Span] = []
    while len(spans) < size:
        start = now - rng.randrange(1, 3_000_000_000_000)
        end = start + rng.randrange(200_000_000, 20_000_000_000)
        trace, parent = rng.randbytes(16), rng.randbytes(8)
        children = _children(rng, trace, parent, start, end)
        llm = Span(
            trace_id=trace,
            span_id=parent,
            name="chat gpt-bench",
            kind=Span.SPAN_KIND_CLIENT,
            start_time_unix_nano=start,
            end_time_unix_nano=end,
            attributes=[
                key_value("gen_ai.operation.name", "chat"),
                key_value("gen_ai.provider.name", "openai"),
                key_value("gen_ai.request.model", "gpt-bench"),
                key_value("gen_ai.response.model", "gpt-bench-2026"),
                key_value("gen_ai.usage.input_tokens", rng.randrange(10, 4000)),
                key_value("gen_ai.usage.output_tokens", rng.randrange(1, 1000)),
                key_value("gen_ai.response.time_to_first_chunk", rng.random()),
            ],
        )
        spans.extend([*children, llm][: size - len(spans)])
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=spans)])]
    )
    return request.SerializeToString()


def measure(
    admin_url: str, workload: str, spans: int, senders: int, batch: int, seal: bool = False
) -> float:
    url = quick.fresh_database(admin_url)
    rng = random.Random(7)
    build = build_http_batch if workload == "http" else quick.build_batch
    bodies = [build(i % 8, batch, rng) for i in range(max(1, spans // batch))]
    proc, base = quick.start_ingest(url)
    try:
        headers = {"Content-Type": "application/x-protobuf"}
        httpx.post(f"{base}/v1/traces", content=bodies[0], headers=headers, timeout=120)
        figures = quick.send_all(base, bodies[1:], senders, batch)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute("SELECT count(*) FROM attempts").fetchone()
    stored = int(row[0]) if row else 0
    print(
        f"{workload:>4}: {figures['spans_per_s']:,.0f} spans/s durable, "
        f"{len(bodies) * batch} spans sent, {stored} stored, "
        f"p50 {figures['p50_ms']:.0f} ms",
        flush=True,
    )
    if stored != len(bodies) * batch:
        raise RuntimeError("not every span was stored")
    if seal:  # the read-time join's cost: a whole seal of the run, attempts per second
        from tpmledger.analytics.seal.sealing import seal_run

        started = time.perf_counter()
        result = seal_run(url, "bench_run")
        elapsed = time.perf_counter() - started
        attempts = result.metrics["attempts"] if result.metrics else 0
        print(f"      seal: {attempts} attempts in {elapsed:.2f} s ({attempts / elapsed:,.0f}/s)")
    return float(figures["spans_per_s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--senders", type=int, default=8)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--admin-url", default=os.environ.get("TPMLEDGER_TEST_ADMIN_URL"))
    parser.add_argument("--seal", action="store_true", help="also time a seal of each run")
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
        print(
            f"ingest_http_children: {args.senders} senders x {args.batch}-span batches, "
            f"{args.spans} spans per workload, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}"
        )
        rates: dict[str, list[float]] = {"llm": [], "http": []}
        for _ in range(args.rounds):
            for workload in ("llm", "http"):
                rates[workload].append(
                    measure(admin_url, workload, args.spans, args.senders, args.batch, args.seal)
                )
        llm, http = (sum(r) / len(r) for r in (rates["llm"], rates["http"]))
        print(
            f"mean llm {llm:,.0f} spans/s, http {http:,.0f} spans/s; "
            f"ratio http/llm {http / llm:.2f}"
        )
        return 0
    finally:
        if server is not None:
            remove_throwaway_server(server)


if __name__ == "__main__":
    sys.exit(main())
