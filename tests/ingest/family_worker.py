"""One shard worker minute, as a user runs it: the official ``openai`` SDK (default
``max_retries=2``) under one instrumentation family plus the httpx instrumentation with
response-header capture, exporting over the real OTLP/HTTP exporter (with ``dump``: the
finished spans written to that file as one ExportTraceServiceRequest instead).

Run as ``python -m tests.ingest.family_worker '<json>'`` in its own process (instrumentors
are global). The JSON gives ``family``, ``base_url``, ``endpoint`` (OTLP/HTTP traces URL),
``resource`` (attributes), ``calls`` (how many; every third one streamed) and
``start_ns``: the clock is shifted so the process's first moment is that time — a run of
several minutes happens in seconds; spans, events and the SDK's timers all read the one
shifted clock (the only seam replaced).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def _shift_clock(start_ns: int) -> None:
    offset = start_ns - time.time_ns()
    real_ns, real = time.time_ns, time.time
    time.time_ns = lambda: real_ns() + offset  # type: ignore[assignment]
    time.time = lambda: real() + offset / 1e9  # type: ignore[assignment]


def _instrument(family: str, provider: object) -> None:
    if family == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=provider)
    elif family == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor as OpenInference

        OpenInference().instrument(tracer_provider=provider)
    elif family == "openai-v2":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as V2

        V2().instrument(tracer_provider=provider)
    elif family == "litellm":
        from opentelemetry import trace

        trace.set_tracer_provider(provider)  # type: ignore[arg-type]
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # no network
        import litellm

        litellm.callbacks = ["otel"]
    elif family != "none":
        raise ValueError(family)


def main(spec: dict) -> None:
    _shift_clock(int(spec["start_ns"]))
    # Imported after the clock moved: the SDK binds time.time_ns at import.
    import openai
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.httpx import (
        HTTPX2ClientInstrumentor,
        HTTPXClientInstrumentor,
    )
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create(spec["resource"]))
    if "dump" in spec:  # the spans kept, for a test to deliver in any order
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        memory = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(memory))
    else:
        exporter = OTLPSpanExporter(endpoint=spec["endpoint"])
        provider.add_span_processor(BatchSpanProcessor(exporter))
    _instrument(spec["family"], provider)
    if spec.get("http", True):
        HTTPX2ClientInstrumentor().instrument(tracer_provider=provider)
        HTTPXClientInstrumentor().instrument(tracer_provider=provider)
    client = openai.OpenAI(base_url=spec["base_url"], api_key="test-key")  # max_retries=2
    messages = [{"role": "user", "content": "Say hello."}]
    if spec["family"] == "litellm":
        _litellm_calls(spec, messages)
        time.sleep(0.5)  # LiteLLM logs its spans from a background worker
        provider.force_flush()
        _finish(spec, provider, memory if "dump" in spec else None)
        return
    for index in range(int(spec["calls"])):
        try:
            if index % 3 == 2:
                stream = client.chat.completions.create(
                    model="gpt-4o-mini",
                    messages=messages,  # type: ignore[arg-type]
                    stream=True,
                    stream_options={"include_usage": True},
                )
                for _ in stream:
                    pass
            else:
                client.chat.completions.create(model="gpt-4o-mini", messages=messages)  # type: ignore[arg-type]
        except openai.RateLimitError:
            pass
    _finish(spec, provider, memory if "dump" in spec else None)


def _finish(spec: dict, provider: Any, memory: Any) -> None:
    provider.force_flush()
    provider.shutdown()
    if memory is not None:
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        with open(spec["dump"], "wb") as file:
            file.write(encode_spans(memory.get_finished_spans()).SerializeToString())


def _litellm_calls(spec: dict, messages: list[dict[str, str]]) -> None:
    import litellm

    for index in range(int(spec["calls"])):
        stream = index % 3 == 2
        extra = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
        try:
            answer = litellm.completion(
                model="openai/gpt-4o-mini",
                api_base=spec["base_url"],
                api_key="test-key",
                messages=messages,
                **extra,
            )
            if stream:
                for _ in answer:
                    pass
        except litellm.RateLimitError:
            pass


if __name__ == "__main__":
    os.environ.setdefault(
        "OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_CLIENT_RESPONSE",
        "x-ratelimit-.*,retry-after",
    )
    main(json.loads(sys.argv[1]))
