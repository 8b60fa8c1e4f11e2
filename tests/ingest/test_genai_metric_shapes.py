"""Both shapes of the GenAI token metrics, and metric streams told apart by attributes of
every type (docs/ingest.md#other-signals), through the real OpenTelemetry SDK metrics
exporter against a running ingest."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import psycopg
import pytest
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    KeyValue,
    KeyValueList,
)
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from tests.fixtures.servers import RunningIngest, free_port, start_ingest
from tests.ingest.openai_compatible_server import serve_openai_compatible, usage_for
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.ingest.genai_metrics import attribute_identity
from tpmledger.storage.server.database import in_one_snapshot, libpq_url
from tpmledger.storage.writers.genai_metric_store import metric_tokens

USAGE = "gen_ai.client.inference.usage."
OPERATION = "gen_ai.client.inference.operation."


@pytest.fixture(scope="module")
def ingest(pg_server_url: str, template_database: str) -> Iterator[RunningIngest]:
    from tests.conftest import create_test_database, drop_test_database

    url = create_test_database(pg_server_url, template_database)
    server = start_ingest(url)
    try:
        yield server
    finally:
        server.stop()
        drop_test_database(pg_server_url, url)


@pytest.fixture
def openai_base_url() -> Iterator[str]:
    with serve_openai_compatible(free_port()) as base_url:
        yield base_url


def _export(
    ingest: RunningIngest, run_id: str, record: Callable[[MeterProvider, int], None]
) -> None:
    """Cumulative exports as the SDK sends them: ``record(provider, round)`` for three
    rounds, each exported twice (the second export repeats the same cumulative values)."""
    exporter = OTLPMetricExporter(endpoint=f"{ingest.http_url}/v1/metrics")
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    resource = Resource.create({"tpmledger.run.id": run_id, "tpmledger.shard.id": "0"})
    provider = MeterProvider(resource=resource, metric_readers=[reader])
    for round_number in range(3):
        record(provider, round_number)
        assert provider.force_flush()  # False when the export failed
        assert provider.force_flush()
    provider.shutdown()


def _by_type(url: str, run_id: str) -> dict[str, float]:
    with psycopg.connect(libpq_url(url)) as conn:
        rows = conn.execute(
            "SELECT token_type, sum(tokens) FROM genai_metric_tokens WHERE run_id = %s "
            "GROUP BY token_type",
            (run_id,),
        ).fetchall()
    return {token_type: float(tokens) for token_type, tokens in rows}


def test_points_that_differ_only_by_a_boolean_are_two_streams(ingest: RunningIngest) -> None:
    # OpenLLMetry's gen_ai.client.token.usage: streamed and plain calls differ by `stream`.
    def record(provider: MeterProvider, _: int) -> None:
        usage = provider.get_meter("openllmetry").create_histogram("gen_ai.client.token.usage")
        for stream, tokens in ((False, 100), (True, 7)):
            attributes = {
                "gen_ai.token.type": "input",
                "gen_ai.request.model": "m",
                "stream": stream,
                "server.port": 443,
                "gen_ai.request.temperature": 0.5,
                "gen_ai.response.finish_reasons": ("stop",),
            }
            usage.record(tokens, attributes)
            usage.record(tokens // 2, {**attributes, "gen_ai.token.type": "output"})

    _export(ingest, "bool-streams", record)
    # Three rounds of (100 + 7) input and (50 + 3) output, each round once.
    assert _by_type(ingest.database_url, "bool-streams") == {"input": 321.0, "output": 159.0}
    assert in_one_snapshot(ingest.database_url, metric_tokens, "bool-streams") == 480


def test_the_newer_counters_are_read_by_token_type(ingest: RunningIngest) -> None:
    def record(provider: MeterProvider, _: int) -> None:
        meter = provider.get_meter("semconv-1.38")
        attributes = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai"}
        for suffix, tokens in (
            ("input_tokens", 40),
            ("output_tokens", 10),
            ("cache_read.input_tokens", 30),
            ("cache_creation.input_tokens", 5),
            ("reasoning.output_tokens", 4),
        ):
            meter.create_counter(USAGE + suffix).add(tokens, attributes)
        # The per-call histograms count the same tokens again: not added twice.
        meter.create_histogram(OPERATION + "input_tokens").record(40, attributes)
        meter.create_histogram(OPERATION + "output_tokens").record(10, attributes)

    _export(ingest, "counters", record)
    assert _by_type(ingest.database_url, "counters") == {
        "input": 120.0,
        "output": 30.0,
        "cache_read": 90.0,
        "cache_write": 15.0,
        "reasoning": 12.0,
    }
    # Cache and reasoning tokens are parts of input and output: not added to them.
    assert in_one_snapshot(ingest.database_url, metric_tokens, "counters") == 150


def test_an_sdk_sending_both_shapes_is_counted_once(ingest: RunningIngest) -> None:
    def record(provider: MeterProvider, _: int) -> None:
        meter = provider.get_meter("dual")
        usage = meter.create_histogram("gen_ai.client.token.usage")
        usage.record(20, {"gen_ai.token.type": "input"})
        usage.record(8, {"gen_ai.token.type": "output"})
        meter.create_counter(USAGE + "input_tokens").add(20)
        meter.create_counter(USAGE + "output_tokens").add(8)
        meter.create_counter(USAGE + "cache_write.input_tokens").add(2)

    _export(ingest, "both-shapes", record)
    assert _by_type(ingest.database_url, "both-shapes") == {
        "input": 60.0,
        "output": 24.0,
        "cache_write": 6.0,
    }


def test_openllmetry_spans_and_metrics_reconcile_without_a_gap(
    ingest: RunningIngest, openai_base_url: str
) -> None:
    # The real OpenLLMetry instrumentation: its token-usage points of plain and streamed
    # calls differ only by `stream`; each cumulative export is counted once.
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    resource = Resource.create(
        {"tpmledger.run.id": "openllmetry-metrics", "tpmledger.shard.id": "0"}
    )
    exporter = OTLPMetricExporter(endpoint=f"{ingest.http_url}/v1/metrics")
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    meters = MeterProvider(resource=resource, metric_readers=[reader])
    tracers = TracerProvider(resource=resource)
    tracers.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{ingest.http_url}/v1/traces"))
    )
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=tracers, meter_provider=meters)
    try:
        client = openai.OpenAI(base_url=openai_base_url, api_key="test-key", max_retries=0)
        messages: Any = [{"role": "user", "content": "Say hello."}]
        for _ in range(3):
            client.chat.completions.create(model="m", messages=messages)
            stream = client.chat.completions.create(
                model="m", messages=messages, stream=True, stream_options={"include_usage": True}
            )
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
            assert meters.force_flush() and meters.force_flush()  # re-sent: adds nothing
    finally:
        instrumentor.uninstrument()
        tracers.shutdown()
        meters.shutdown()
    LiveUpdater(ingest.database_url).update_once()
    run = httpx.get(f"{ingest.http_url}/v1/runs/openllmetry-metrics", timeout=30).json()
    usage = usage_for(messages)
    expected = 6 * (usage["prompt_tokens"] + usage["completion_tokens"])
    assert run["reconciliation"] == {
        "tokens_by_spans": expected,
        "tokens_by_metrics": expected,
        "gap": 0,
    }


def _kv(key: str, value: AnyValue) -> KeyValue:
    return KeyValue(key=key, value=value)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (AnyValue(bool_value=True), AnyValue(bool_value=False)),
        (AnyValue(bool_value=True), AnyValue(string_value="true")),
        (AnyValue(int_value=1), AnyValue(bool_value=True)),
        (AnyValue(int_value=1), AnyValue(double_value=1.5)),
        (AnyValue(bytes_value=b"\x00\x01"), AnyValue(bytes_value=b"\x00\x02")),
        (
            AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="a")])),
            AnyValue(array_value=ArrayValue(values=[AnyValue(string_value="b")])),
        ),
        (
            AnyValue(kvlist_value=KeyValueList(values=[_kv("k", AnyValue(int_value=1))])),
            AnyValue(kvlist_value=KeyValueList(values=[_kv("k", AnyValue(int_value=2))])),
        ),
        (AnyValue(), AnyValue(string_value="")),
    ],
)
def test_attribute_identity_tells_every_type_apart(first: AnyValue, second: AnyValue) -> None:
    assert attribute_identity([_kv("a", first)]) != attribute_identity([_kv("a", second)])
    assert attribute_identity([_kv("a", first)]) == attribute_identity([_kv("a", first)])


def test_attribute_identity_keeps_the_spelling_of_strings_and_numbers() -> None:
    # Streams stored before every type was told apart continue under the same identity.
    items = [
        _kv("s", AnyValue(string_value="x")),
        _kv("i", AnyValue(int_value=5)),
        _kv("d", AnyValue(double_value=1.5)),
    ]
    assert attribute_identity(items) == ["d=1.5", "i=5", "s=x"]
