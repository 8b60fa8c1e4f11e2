"""The OTLP/HTTP codec alone: encodings, limits, protobuf and OTLP/JSON decoding."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from tests.ingest.otlp_builders import export_request, json_request, json_span, llm_span
from tpmledger.ingest.error_taxonomy import PayloadTooLarge, UndecodableBody, UnsupportedMediaType
from tpmledger.ingest.otlp_http_codec import (
    JSON,
    MAX_DECOMPRESSED_BYTES,
    PROTOBUF,
    BodyReader,
    decode_request,
    encode_message,
    media_type,
)

TRACE_HEX = "5b8efff798038103d269b633813fc60c"
SPAN_HEX = "eee19b7ec3c1b174"


def read(body: bytes, encoding: str | None, chunk: int = 7, **limits: int) -> bytes:
    reader = BodyReader(encoding, **limits)
    for i in range(0, len(body), chunk):
        reader.feed(body[i : i + chunk])
    return bytes(reader.finish())


def test_media_types_with_parameters_and_aliases() -> None:
    assert media_type("application/json; charset=utf-8") == JSON
    assert media_type("Application/X-Protobuf") == PROTOBUF
    assert media_type("application/protobuf") == PROTOBUF
    for bad in (None, "", "text/plain", "application/grpc"):
        with pytest.raises(UnsupportedMediaType):
            media_type(bad)


def test_identity_gzip_and_deflate_bodies_decode_in_small_chunks() -> None:
    payload = export_request([llm_span() for _ in range(20)]).SerializeToString()
    assert read(payload, None) == payload
    assert read(payload, "identity") == payload
    assert read(gzip.compress(payload), "gzip") == payload
    assert read(gzip.compress(payload), "x-gzip", chunk=1) == payload
    assert read(zlib.compress(payload), "deflate") == payload
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    assert read(raw.compress(payload) + raw.flush(), "deflate") == payload


def test_concatenated_gzip_members_are_one_body() -> None:
    assert read(gzip.compress(b"abc") + gzip.compress(b"def"), "gzip") == b"abcdef"


def test_unsupported_encoding_is_415() -> None:
    with pytest.raises(UnsupportedMediaType):
        BodyReader("br")


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_truncated_or_corrupt_compressed_body_is_400(encoding: str) -> None:
    payload = b"x" * 10_000
    body = gzip.compress(payload) if encoding == "gzip" else zlib.compress(payload)
    with pytest.raises(UndecodableBody):
        read(body[: len(body) // 2], encoding)
    with pytest.raises(UndecodableBody):
        read(b"this is not compressed at all", encoding)
    with pytest.raises(UndecodableBody):
        read(b"", encoding)


def test_compressed_limit_is_413_before_reading_everything() -> None:
    reader = BodyReader(None, max_compressed=100)
    reader.feed(b"a" * 100)
    with pytest.raises(PayloadTooLarge):
        reader.feed(b"a")


def test_gzip_bomb_stops_at_the_decompressed_limit() -> None:
    # ~65 KiB on the wire, 65 MiB inflated: over the real 64 MiB limit.
    bomb = gzip.compress(bytes(MAX_DECOMPRESSED_BYTES + 1024 * 1024), compresslevel=9)
    assert len(bomb) < 100_000
    with pytest.raises(PayloadTooLarge):
        read(bomb, "gzip", chunk=65_536)


def test_deflate_bomb_with_small_limits() -> None:
    bomb = zlib.compress(bytes(10_000))
    with pytest.raises(PayloadTooLarge):
        read(bomb, "deflate", max_decompressed=9_999)
    assert read(bomb, "deflate", max_decompressed=10_000) == bytes(10_000)


def test_protobuf_request_round_trips() -> None:
    request = export_request([llm_span(), llm_span()])
    assert decode_request(request.SerializeToString(), PROTOBUF) == request


@pytest.mark.parametrize("body", [b"\xff\xff\xff\xff", b"\x0a\x05abc"])
def test_undecodable_protobuf_is_400(body: bytes) -> None:
    with pytest.raises(UndecodableBody):
        decode_request(body, PROTOBUF)


def test_otlp_json_hex_ids_int64_strings_and_enum_integers() -> None:
    start = 1_769_917_440_000_000_000
    document = json_request(
        [
            json_span(
                trace_id=TRACE_HEX,
                span_id=SPAN_HEX,
                parentSpanId="",
                prompt="123",  # int64 as a string
                completion=45,  # int64 as a number
                start_ns=start,
                links=[{"traceId": TRACE_HEX, "spanId": SPAN_HEX}],
                someFutureField={"ignored": True},
            )
        ],
        run_id="r",
        shard_id="1",
    )
    request = decode_request(json.dumps(document).encode(), JSON)
    span = request.resource_spans[0].scope_spans[0].spans[0]
    assert span.trace_id.hex() == TRACE_HEX
    assert span.span_id.hex() == SPAN_HEX
    assert span.parent_span_id == b""
    assert span.links[0].trace_id.hex() == TRACE_HEX
    assert span.kind == 3
    assert span.start_time_unix_nano == start
    assert span.end_time_unix_nano == start + 1_500_000_000
    tokens = {a.key: a.value.int_value for a in span.attributes if a.value.HasField("int_value")}
    assert tokens == {"gen_ai.usage.input_tokens": 123, "gen_ai.usage.output_tokens": 45}


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[1, 2]",
        b"\xff\xfe garbage",
        b'{"resourceSpans": "nope"}',
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}',
        b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "x"}]}]}]}',
        b"[" * 100_000,
    ],
)
def test_undecodable_json_is_400(body: bytes) -> None:
    with pytest.raises(UndecodableBody):
        decode_request(body, JSON)


def test_responses_are_encoded_like_the_request() -> None:
    response = ExportTraceServiceResponse()
    response.partial_success.rejected_spans = 2
    response.partial_success.error_message = "end before start"
    assert ExportTraceServiceResponse.FromString(encode_message(response, PROTOBUF)) == response
    document = json.loads(encode_message(response, JSON))
    assert document == {
        "partialSuccess": {"rejectedSpans": "2", "errorMessage": "end before start"}
    }
