"""Runs with a known bottleneck, recorded by the OpenTelemetry SDK (docs/metrics.md#bottleneck).

Each run is one shard with ``lanes`` workers that each hold a slot back to back: a lane
starts an attempt every 10 seconds and holds it 9.9 s, covering every whole-second instant,
so the in-flight mean of a full minute is exactly ``lanes``; every lane ends 6 attempts a
minute (48 a minute with 8 lanes). A successful attempt reports 100 prompt + 50 completion
tokens. Six minutes, starting ten minutes ago (whole minutes), so minutes 1–4 are inner.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

MINUTE_NS = 60_000_000_000
SECOND_NS = 1_000_000_000
MINUTES = 6
PER_LANE_PER_MINUTE = 6
PROMPT, COMPLETION = 100, 50
HEADER = "http.response.header."

#: (minute index, lane, attempt index in the lane's minute) → extra attributes and status.
Shape = Callable[[int, int, int], dict[str, Any]]


def base_minute_ns() -> int:
    """The first minute of a run: ten whole minutes ago."""
    now = time.time_ns()
    return (now // MINUTE_NS - 10) * MINUTE_NS


def minute_text(base_ns: int, index: int) -> str:
    moment = time.gmtime((base_ns + index * MINUTE_NS) // SECOND_NS)
    return time.strftime("%Y-%m-%dT%H:%M:00Z", moment)


@dataclass
class RunSpec:
    """One run: its id, lanes, declared cap (None: not declared) and per-attempt shape."""

    run_id: str
    lanes: int = 8
    cap: int | None = 8
    shape: Shape = field(default=lambda m, lane, i: {})
    resource: dict[str, Any] = field(default_factory=dict)


def record_run(spec: RunSpec, base_ns: int) -> list[ReadableSpan]:
    """The run's attempt spans, as an instrumented worker's SDK records them."""
    memory = InMemorySpanExporter()
    attributes: dict[str, Any] = {
        "tpmledger.run.id": spec.run_id,
        "tpmledger.shard.id": "0",
        **spec.resource,
    }
    if spec.cap is not None:
        attributes["tpmledger.concurrency.cap"] = spec.cap
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bottleneck-runs")
    for m in range(MINUTES):
        for lane in range(spec.lanes):
            for i in range(PER_LANE_PER_MINUTE):
                start = base_ns + m * MINUTE_NS + i * 10 * SECOND_NS - 300_000_000
                start = max(start, base_ns)
                end = base_ns + m * MINUTE_NS + (i + 1) * 10 * SECOND_NS - 400_000_000
                extra = dict(spec.shape(m, lane, i))
                failed = extra.pop("_error", None)
                attrs: dict[str, Any] = {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "gpt-test",
                    "gen_ai.provider.name": "openai",
                }
                if failed is None:
                    attrs["gen_ai.usage.input_tokens"] = PROMPT
                    attrs["gen_ai.usage.output_tokens"] = COMPLETION
                    attrs["http.response.status_code"] = 200
                else:
                    attrs["http.response.status_code"] = failed[0]
                    attrs["error.type"] = failed[1]
                attrs.update(extra)
                span = tracer.start_span("chat gpt-test", start_time=start, attributes=attrs)
                if failed is not None:
                    span.set_status(Status(StatusCode.ERROR))
                span.end(end_time=end)
    provider.shutdown()
    return list(memory.get_finished_spans())


# --- The five runs of the issue ------------------------------------------------------

QUOTA_TPM = 7200  # 45 successes × 150 tokens = 6750 a minute: headroom 1 − 6750/7200


def quota_bound(m: int, lane: int, i: int) -> dict[str, Any]:
    """The provider's quota binds: 3 of 48 attempts a minute answered 429 in the inner
    minutes (6.25 %), every response reporting its limit (a string array, as HTTP
    instrumentations capture headers) and the tokens remaining."""
    attrs: dict[str, Any] = {
        HEADER + "x-ratelimit-limit-tokens": [str(QUOTA_TPM)],
        HEADER + "x-ratelimit-limit-requests": ["500"],
        HEADER + "x-ratelimit-remaining-tokens": [str(max(QUOTA_TPM - 150 * (lane * 6 + i), 0))],
    }
    if 1 <= m <= 4 and lane < 3 and i == 5:
        attrs |= {"_error": (429, "rate_limit_exceeded"), HEADER + "retry-after": ["2"]}
    return attrs


def cap_bound(m: int, lane: int, i: int) -> dict[str, Any]:
    """Slots full, no 429s, 50 % headroom: 48 × 150 = 7200 tokens of a declared 14400."""
    return {"tpmledger.quota.tpm": 14400}


def serving_failures(m: int, lane: int, i: int) -> dict[str, Any]:
    """4 of 48 attempts a minute (8.3 %) fail with 503."""
    return {"_error": (503, "http_503")} if lane < 4 and i == 0 else {}


RUNS: dict[str, RunSpec] = {
    "quota-bound": RunSpec("quota-bound", shape=quota_bound),
    "cap-bound": RunSpec("cap-bound", shape=cap_bound),
    "serving": RunSpec("serving", shape=serving_failures),
    "demand": RunSpec("demand", lanes=8, cap=24),
    "no-cap": RunSpec("no-cap", cap=None),
}
