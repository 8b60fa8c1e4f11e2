"""Hostile input at the running server (docs/ingest.md "Bad input never crashes the process").

Property-based: malformed and mutated protobuf, hostile OTLP/JSON (deep nesting, huge
numbers, wrong types, NaN, non-UTF-8), truncated and bomb gzip/deflate, absurd attribute
sizes and counts, wrong content types and encodings. For every example:

- the answer is one of the spec's codes (200 with partial success, 400, 401, 413, 415,
  503) — never a 5xx crash page — and a 200 body decodes as ``ExportTraceServiceResponse``;
- the server stays up (``/healthz`` answers after each example);
- at the end of each test nothing stored breaks a docs/conventions.md validation rule.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import random
import string
import zlib
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import httpx
import pytest
from google.protobuf import json_format
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from tests.fixtures.fault_servers import invalid_row_count, llm_spans
from tests.fixtures.servers import RunningIngest

pytestmark = pytest.mark.slow

SPEC_CODES = {200, 400, 401, 413, 415, 503}
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.fixture(scope="module")
def client(module_ingest: RunningIngest) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=module_ingest.http_url, timeout=60) as c:
        yield c


@pytest.fixture(autouse=True)
def nothing_invalid_stored(module_ingest: RunningIngest) -> Any:
    yield
    total, invalid = invalid_row_count(module_ingest.database_url)
    assert invalid == 0, f"{invalid} of {total} stored rows break docs/conventions.md validation"


def post(
    client: httpx.Client,
    body: bytes,
    content_type: str | None = PROTOBUF,
    encoding: str | None = None,
) -> httpx.Response:
    """POST a body, check the answer is a spec code and the server is still up."""
    headers = {}
    if content_type is not None:
        headers["Content-Type"] = content_type
    if encoding is not None:
        headers["Content-Encoding"] = encoding
    response = client.post("/v1/traces", content=body, headers=headers)
    assert response.status_code in SPEC_CODES, (response.status_code, response.text[:500])
    if response.status_code == 200:
        decoded = ExportTraceServiceResponse()
        if response.headers["content-type"].startswith(JSON):
            json_format.Parse(response.text, decoded)
        else:
            decoded.ParseFromString(response.content)
    if response.status_code == 503:
        assert response.headers.get("Retry-After")
    assert client.get("/healthz").status_code == 200
    return response


@lru_cache(maxsize=1)
def valid_body() -> bytes:
    return encode_spans(llm_spans(20)).SerializeToString()


def otlp_json(request: ExportTraceServiceRequest) -> dict[str, Any]:
    """OTLP/JSON (hex ids) of a protobuf request."""
    document = json_format.MessageToDict(request)
    for rs in document.get("resourceSpans", []):
        for ss in rs.get("scopeSpans", []):
            for span in ss.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return document


@lru_cache(maxsize=1)
def valid_json_span() -> dict[str, Any]:
    return otlp_json(ExportTraceServiceRequest.FromString(valid_body()))["resourceSpans"][0][
        "scopeSpans"
    ][0]["spans"][0]


# --- protobuf ----------------------------------------------------------------------


@FUZZ
@given(body=st.binary(max_size=4096))
def test_random_bytes_as_protobuf(client: httpx.Client, body: bytes) -> None:
    assert post(client, body).status_code in {200, 400}


@FUZZ
@given(data=st.data())
def test_mutated_protobuf(client: httpx.Client, data: st.DataObject) -> None:
    body = bytearray(valid_body())
    for _ in range(data.draw(st.integers(1, 8))):
        position = data.draw(st.integers(0, len(body) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            body[position] ^= data.draw(st.integers(1, 255))
        elif action == "cut":
            del body[position : position + data.draw(st.integers(1, 64))]
        else:
            body[position:position] = data.draw(st.binary(min_size=1, max_size=16))
        if not body:
            break
    assert post(client, bytes(body)).status_code in {200, 400}


def nested_any_value(depth: int) -> AnyValue:
    """An attribute value nested ``depth`` arrays deep (2 message levels per array)."""
    value = AnyValue(string_value="leaf")
    for _ in range(depth):
        outer = AnyValue()
        outer.array_value.values.add().CopyFrom(value)
        value = outer
    return value


def test_deeply_nested_protobuf_attribute(client: httpx.Client) -> None:
    request = ExportTraceServiceRequest.FromString(valid_body())
    span = request.resource_spans[0].scope_spans[0].spans[0]
    span.attributes.append(KeyValue(key="deep", value=nested_any_value(40)))
    assert post(client, request.SerializeToString()).status_code in {200, 400}
    # Far past protobuf's recursion limit, in a span's attribute: built by hand, since the
    # library refuses to build it. Serialized messages merge, so appending field 9
    # (Span.attributes) to a valid span's bytes adds the deep KeyValue to it.
    deep = _field(1, b"leaf")  # AnyValue.string_value
    for _ in range(5000):
        deep = _field(5, _field(1, deep))  # AnyValue.array_value → ArrayValue.values
    valid = ExportTraceServiceRequest.FromString(valid_body())
    span = valid.resource_spans[0].scope_spans[0].spans[0].SerializeToString()
    span += _field(9, _field(1, b"deep") + _field(2, deep))  # KeyValue{key, value}
    resource = valid.resource_spans[0].resource.SerializeToString()
    body = _field(1, _field(1, resource) + _field(2, _field(2, span)))
    assert post(client, body).status_code in {200, 400}
    # The same value as a resource attribute of a request with no spans.
    assert post(client, _field(1, _field(1, _field(1, _field(2, deep))))).status_code in {200, 400}


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


# --- OTLP/JSON ---------------------------------------------------------------------

hostile_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.sampled_from([10**400, -(10**30), 2**63, 2**64, -1, 0]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.sampled_from(["NaN", "1e309", "0x10", "", "ffffffffffffffffffffffffffffffff", "\x00"]),
)
json_values = st.recursive(
    hostile_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
SPAN_FIELDS = [
    "traceId",
    "spanId",
    "parentSpanId",
    "name",
    "kind",
    "startTimeUnixNano",
    "endTimeUnixNano",
    "attributes",
    "status",
    "events",
    "links",
]
ATTRIBUTE_KEYS = [
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.operation.name",
    "tpmledger.run.id",
    "tpmledger.shard.id",
    "tpmledger.queue.wait_s",
    "gen_ai.response.time_to_first_chunk",
    "gen_ai.response.finish_reasons",
    "http.response.status_code",
]


@st.composite
def hostile_attribute(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(
        st.sampled_from(
            [
                "intValue",
                "doubleValue",
                "stringValue",
                "boolValue",
                "arrayValue",
                "kvlistValue",
                "bytesValue",
                "bogus",
            ]
        )
    )
    return {"key": draw(st.sampled_from(ATTRIBUTE_KEYS)), "value": {kind: draw(json_values)}}


@st.composite
def hostile_span(draw: st.DrawFn) -> dict[str, Any]:
    span = dict(valid_json_span())
    for key in draw(st.lists(st.sampled_from(SPAN_FIELDS), max_size=3, unique=True)):
        span[key] = draw(json_values)
    if draw(st.booleans()):
        span["attributes"] = [
            *valid_json_span()["attributes"],
            *draw(st.lists(hostile_attribute(), max_size=4)),
        ]
    return span


@FUZZ
@given(spans=st.lists(hostile_span(), min_size=1, max_size=5), wrap=st.booleans())
def test_hostile_otlp_json_spans(client: httpx.Client, spans: list[Any], wrap: bool) -> None:
    document: Any = {"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}
    if wrap:
        document = {"resourceSpans": [{"resource": {"attributes": spans}, "scopeSpans": spans}]}
    body = json.dumps(document, allow_nan=True).encode()
    assert post(client, body, JSON).status_code in {200, 400}


@FUZZ
@given(document=json_values)
def test_arbitrary_json_documents(client: httpx.Client, document: Any) -> None:
    body = json.dumps(document, allow_nan=True).encode()
    assert post(client, body, JSON).status_code in {200, 400}


@FUZZ
@given(garbage=st.binary(min_size=1, max_size=8), position=st.integers(0, 10_000))
def test_non_utf8_in_otlp_json(client: httpx.Client, garbage: bytes, position: int) -> None:
    body = json.dumps(otlp_json(ExportTraceServiceRequest.FromString(valid_body()))).encode()
    position %= len(body)
    mutated = body[:position] + b"\xff\xfe" + garbage + body[position:]
    assert post(client, mutated, JSON).status_code in {200, 400}


@pytest.mark.parametrize("depth", [200, 5_000, 200_000])
def test_deeply_nested_json(client: httpx.Client, depth: int) -> None:
    arrays = b"[" * depth + b"]" * depth
    # 400, or 413 when what parsing it would build passes the count limit or the budget.
    assert post(client, arrays, JSON).status_code in {400, 413}
    # An attribute value nested that deep, written by hand (json.dumps would recurse).
    nesting = min(depth, 5_000)
    value = '{"arrayValue":{"values":[' * nesting + '{"stringValue":"leaf"}' + "]}}" * nesting
    span = json.dumps({**valid_json_span(), "attributes": [{"key": "deep", "value": 0}]})
    span = span.replace('"value": 0', f'"value": {value}')
    body = '{"resourceSpans":[{"scopeSpans":[{"spans":[' + span + "]}]}]}"
    assert post(client, body.encode(), JSON).status_code in {200, 400}


def test_out_of_range_token_counts_are_rejected_not_stored(client: httpx.Client) -> None:
    span = valid_json_span()
    bad_values = [
        ("intValue", 10**10),
        ("intValue", -5),
        ("doubleValue", 1.5),
        ("doubleValue", "NaN"),  # OTLP/JSON spells non-finite doubles as strings
        ("doubleValue", "Infinity"),
        ("stringValue", "12"),
    ]
    spans = []
    for i, (kind, tokens) in enumerate(bad_values):
        bad = dict(span, spanId=f"{0xBAD000 + i:016x}", traceId=os.urandom(16).hex())
        bad["attributes"] = [
            *span["attributes"],
            {"key": "gen_ai.usage.output_tokens", "value": {kind: tokens}},
        ]
        spans.append(bad)
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]}).encode()
    response = post(client, body, JSON)
    assert response.status_code == 200, response.text
    assert response.json()["partialSuccess"]["rejectedSpans"] in (6, "6")


# --- encodings ---------------------------------------------------------------------


# Anything a client library lets through as a header value: visible ASCII, inner spaces.
header_values = st.from_regex(r"\A[!-~](?:[ -~]{0,30}[!-~])?\Z")


@lru_cache(maxsize=1)
def gzip_bomb() -> bytes:
    """~80 MiB of zeros in well under 16 MiB of gzip: past the 64 MiB decompressed limit."""
    return gzip.compress(bytes(80 * 2**20), compresslevel=9)


def test_decompression_bombs_answer_413(client: httpx.Client) -> None:
    assert post(client, gzip_bomb(), PROTOBUF, "gzip").status_code == 413
    deflate_bomb = zlib.compress(bytes(80 * 2**20), 9)
    assert post(client, deflate_bomb, PROTOBUF, "deflate").status_code == 413
    # Concatenated gzip members, each small, together over the limit.
    member = gzip.compress(bytes(20 * 2**20), compresslevel=9)
    assert post(client, member * 4, PROTOBUF, "gzip").status_code == 413


def test_oversize_bodies_answer_413(client: httpx.Client) -> None:
    assert post(client, b"\x00" * (16 * 2**20 + 1)).status_code == 413


@FUZZ
@given(cut=st.floats(0.0, 0.999), encoding=st.sampled_from(["gzip", "deflate"]))
def test_truncated_compressed_bodies(client: httpx.Client, cut: float, encoding: str) -> None:
    compressed = gzip.compress(valid_body()) if encoding == "gzip" else zlib.compress(valid_body())
    truncated = compressed[: int(len(compressed) * cut)]
    assert post(client, truncated, PROTOBUF, encoding).status_code == 400


@FUZZ
@given(body=st.binary(max_size=2048), encoding=st.sampled_from(["gzip", "deflate"]))
def test_garbage_compressed_bodies(client: httpx.Client, body: bytes, encoding: str) -> None:
    assert post(client, body, PROTOBUF, encoding).status_code in {200, 400}


@FUZZ
@given(
    encoding=header_values.filter(
        lambda e: e.lower() not in {"identity", "gzip", "x-gzip", "deflate"}
    )
)
def test_unsupported_encodings_answer_415(client: httpx.Client, encoding: str) -> None:
    assert post(client, gzip.compress(valid_body()), PROTOBUF, encoding).status_code == 415


@FUZZ
@given(
    content_type=st.one_of(
        st.none(),
        header_values,
        st.sampled_from(
            [
                "text/plain",
                "application/grpc",
                "application/xml",
                "application/x-protobuf-json",
                "multipart/form-data; boundary=x",
            ]
        ),
    )
)
def test_wrong_content_types(client: httpx.Client, content_type: str | None) -> None:
    base = (content_type or "").split(";", 1)[0].strip().lower()
    expected = {200, 400} if base in {PROTOBUF, "application/protobuf", JSON} else {415}
    assert post(client, valid_body(), content_type).status_code in expected


# --- absurd sizes and counts -----------------------------------------------------------


def request_with(attributes: list[KeyValue], spans: int = 1) -> bytes:
    request = ExportTraceServiceRequest.FromString(valid_body())
    scope = request.resource_spans[0].scope_spans[0]
    template = ExportTraceServiceRequest.FromString(valid_body())
    del scope.spans[:]
    trace_id = os.urandom(16)  # new spans every call: stored, not deduplicated
    for i in range(spans):
        span = scope.spans.add()
        span.CopyFrom(template.resource_spans[0].scope_spans[0].spans[1])  # a successful call
        span.trace_id = trace_id
        span.span_id = (i + 1 | 1 << 60).to_bytes(8, "big")
        span.attributes.extend(attributes)
    return request.SerializeToString()


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    count=st.integers(0, 50_000),
    size=st.integers(0, 2**20),
    key_size=st.integers(1, 2**16),
)
def test_absurd_attribute_sizes_and_counts(
    client: httpx.Client, count: int, size: int, key_size: int
) -> None:
    attributes = [KeyValue(key=f"k{i}", value=AnyValue(int_value=i)) for i in range(count)]
    attributes.append(KeyValue(key="x" * key_size, value=AnyValue(string_value="v" * size)))
    body = request_with(attributes)
    expected = {200} if len(body) <= 16 * 2**20 else {413}
    assert post(client, body).status_code in expected


def test_many_spans_and_huge_values(client: httpx.Client) -> None:
    huge = KeyValue(key="gen_ai.response.model", value=AnyValue(string_value="m" * 8 * 2**20))
    assert post(client, request_with([huge])).status_code == 200
    assert post(client, request_with([], spans=20_000)).status_code == 200
    gzipped = gzip.compress(request_with([huge], spans=9))  # ~72 MiB decompressed
    assert post(client, gzipped, PROTOBUF, "gzip").status_code == 413


@settings(max_examples=40, deadline=None)
@given(size=st.integers(1, 200_000), where=st.sampled_from(["shard", "model", "call"]))
def test_absurd_identifier_lengths(client: httpx.Client, size: int, where: str) -> None:
    """Long ids of any length: 200 (stored or rejected) or 400, never a crash."""
    key = {
        "shard": "tpmledger.shard.id",
        "model": "gen_ai.response.model",
        "call": "tpmledger.call.id",
    }[where]
    value = random.Random(size).choices(string.ascii_letters, k=size)
    body = request_with([KeyValue(key=key, value=AnyValue(string_value="".join(value)))])
    assert post(client, body).status_code in {200, 400}


# An incompressible id over ~2.7 kB exceeds the btree index limit (ProgramLimitExceeded):
# the group-commit writer isolates the request and answers 400, never a retryable 503.
@pytest.mark.parametrize("key", ["tpmledger.run.id", "tpmledger.sweep.id"])
def test_incompressible_long_run_and_sweep_ids_are_not_retryable(
    client: httpx.Client, key: str
) -> None:
    value = "".join(random.Random(7).choices(string.ascii_letters, k=10_000))
    body = request_with([KeyValue(key=key, value=AnyValue(string_value=value))])
    assert post(client, body).status_code in {200, 400}


# --- gRPC ----------------------------------------------------------------------------

GRPC_CODES = {"OK", "INVALID_ARGUMENT", "UNAVAILABLE", "UNAUTHENTICATED", "RESOURCE_EXHAUSTED"}


@pytest.fixture(scope="module")
def grpc_export(module_ingest: RunningIngest) -> Iterator[Any]:
    """``TraceService/Export`` taking raw request bytes, so any bytes can be sent."""
    import grpc

    with grpc.insecure_channel(module_ingest.grpc_endpoint) as channel:
        yield channel.unary_unary(
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            request_serializer=None,
            response_deserializer=ExportTraceServiceResponse.FromString,
        )


@FUZZ
@given(data=st.data())
def test_grpc_random_and_mutated_requests(
    client: httpx.Client, grpc_export: Any, data: st.DataObject
) -> None:
    import grpc

    body: bytes
    if data.draw(st.booleans()):
        body = data.draw(st.binary(max_size=4096))
    else:
        mutated = bytearray(valid_body())
        position = data.draw(st.integers(0, len(mutated) - 1))
        mutated[position] ^= data.draw(st.integers(1, 255))
        body = bytes(mutated[: data.draw(st.integers(position, len(mutated)))])
    try:
        grpc_export(body, timeout=30)
        code = "OK"
    except grpc.RpcError as err:
        code = err.code().name
    assert code in GRPC_CODES
    assert client.get("/healthz").status_code == 200
