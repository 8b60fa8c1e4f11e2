"""Micro-benchmark: spans/s of ``ingest.normalize.normalize_request`` alone.

Builds one export request of 512 simulator-like spans (tpmledger.* + gen_ai.* keys, one
resource per shard) and normalizes it repeatedly on one core; no database, no HTTP.

Run: ``.venv/bin/python bench/normalize.py [--spans 512] [--seconds 5]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

# bench/ holds scripts named like the packages (bench/ingest_alone.py): import the real ones.
_ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT / "bench"]
sys.path.insert(0, str(_ROOT))

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status  # noqa: E402

from tests.otlp_values import key_value  # noqa: E402
from tpmledger.ingest.normalize import normalize_payload, normalize_request  # noqa: E402

BASE_NS = 1_769_917_440 * 1_000_000_000


def build_request(spans: int, shards: int = 8) -> ExportTraceServiceRequest:
    """One request of ``spans`` simulator-like LLM-call spans spread over ``shards``."""
    request = ExportTraceServiceRequest()
    per_shard = spans // shards
    for shard in range(shards):
        resource_spans = request.resource_spans.add()
        resource_spans.resource.attributes.extend(
            key_value(k, v)
            for k, v in {
                "service.name": "llm-worker",
                "tpmledger.run.id": "newgen_full_20260201_030151_sharded",
                "tpmledger.shard.id": str(shard),
                "tpmledger.shard.count": "8",
                "tpmledger.concurrency.cap": "16",
                "host.name": f"gpu-node-{shard}",
                "process.pid": 4000 + shard,
                "telemetry.sdk.language": "python",
                "telemetry.sdk.name": "opentelemetry",
                "telemetry.sdk.version": "1.45.2",
            }.items()
        )
        scope_spans = resource_spans.scope_spans.add()
        scope_spans.scope.name = "tpmledger.simulator"
        for i in range(per_shard):
            start = BASE_NS + i * 50_000_000
            failed = i % 20 == 0
            attributes = {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "llama-3.1-70b",
                "gen_ai.response.model": "llama-3.1-70b-instruct",
                "tpmledger.call.id": f"call-{shard}-{i // 2}",
                "tpmledger.queue.wait_s": 0.012,
                "server.address": "10.0.0.12",
                "server.port": 8000,
            }
            if failed:
                attributes |= {"error.type": "rate_limited", "http.response.status_code": 429}
            else:
                attributes |= {
                    "gen_ai.usage.input_tokens": 812 + i,
                    "gen_ai.usage.output_tokens": 256,
                    "gen_ai.response.time_to_first_chunk": 0.183,
                    "gen_ai.response.finish_reasons": ["stop"],
                    "http.response.status_code": 200,
                }
            if i % 2:
                attributes["http.request.resend_count"] = 1
            span = Span(
                trace_id=os.urandom(16),
                span_id=os.urandom(8),
                name="chat llama-3.1-70b",
                kind=Span.SPAN_KIND_CLIENT,
                start_time_unix_nano=start,
                end_time_unix_nano=start + 2_400_000_000,
                attributes=[key_value(k, v) for k, v in attributes.items()],
                status=Status(code=Status.STATUS_CODE_ERROR if failed else Status.STATUS_CODE_OK),
            )
            scope_spans.spans.append(span)
    return request


def main() -> None:
    """Print spans/s of normalize_request over a fixed wall-clock budget."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spans", type=int, default=512)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    request = build_request(args.spans)
    # Decode from bytes, as the server does, so the message is a freshly parsed one.
    payload = request.SerializeToString()
    request = ExportTraceServiceRequest.FromString(payload)
    total = len([s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans])
    batch = normalize_request(request)
    assert len(batch.rows) == total and batch.rejected == 0, batch
    print(f"request: {total} spans, {len(payload)} bytes protobuf")
    # CPU time of this process, not wall time: the figure should not depend on what
    # else the (shared, 2-core) machine is doing; wall-clock spans/s is printed too.
    for label, make in (
        ("normalize_request", lambda: request),
        ("decode + normalize_request", lambda: ExportTraceServiceRequest.FromString(payload)),
        ("normalize_payload (from the protobuf bytes)", None),
    ):
        loops = 0
        fastest = float("inf")
        wall, cpu = time.perf_counter(), time.process_time()
        while time.process_time() - cpu < args.seconds:
            started = time.process_time()
            if make is None:
                normalize_payload(payload)
            else:
                normalize_request(make())
            fastest = min(fastest, time.process_time() - started)
            loops += 1
        cpu_s, wall_s = time.process_time() - cpu, time.perf_counter() - wall
        print(
            f"{label}: {loops * total / cpu_s:,.0f} spans/s of CPU time "
            f"({loops * total / wall_s:,.0f} spans/s wall, {loops} requests of {total} spans; "
            f"fastest request {total / fastest:,.0f} spans/s)"
        )


if __name__ == "__main__":
    main()
