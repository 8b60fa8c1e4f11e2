"""The lean wire view reads what the real OTLP messages hold; the decoder cache is bounded."""

from __future__ import annotations

import pytest
from google.protobuf.message import DecodeError
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from tests.ingest.span_builders import request, span
from tests.otlp_values import key_values
from tpmledger.ingest.attribute_values import key_values_to_dict
from tpmledger.ingest.trace_view import MAX_KEY_MISSES, AttributeDecoder, parse_request_view


def test_view_reads_the_same_fields_as_the_real_message() -> None:
    real = span(
        {"a": 1, "b": [1.5, "x"], "c": {"d": True}},
        name="chat",
        parent_span_id=b"\x07" * 8,
        status_code=Status.STATUS_CODE_ERROR,
        kind=Span.SPAN_KIND_SERVER,
        events=[("gen_ai.content.completion.chunk", 5)],
    )
    # Fields the view does not declare must be skipped, not break parsing.
    real.trace_state = "vendor=1"
    real.flags = 0x301
    real.dropped_attributes_count = 3
    real.links.add(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    message = request(real, resource={"service.name": "svc"})
    message.resource_spans[0].schema_url = "https://opentelemetry.io/schemas/1.26.0"
    message.resource_spans[0].scope_spans[0].scope.name = "scope"

    view = parse_request_view(message.SerializeToString())
    resource_spans = view.resource_spans[0]
    seen = resource_spans.scope_spans[0].spans[0]
    for field in ("trace_id", "span_id", "parent_span_id", "kind"):
        assert getattr(seen, field) == getattr(real, field), field
    assert seen.name == real.name.encode()  # bytes: a non-UTF-8 name refuses its span only
    assert seen.start_time_unix_nano == real.start_time_unix_nano
    assert seen.end_time_unix_nano == real.end_time_unix_nano
    assert seen.status.code == Status.STATUS_CODE_ERROR
    assert [Span.Event.FromString(e).name for e in seen.events] == [real.events[0].name]
    decoder = AttributeDecoder()
    assert decoder.decode(seen.attributes) == key_values_to_dict(real.attributes)
    assert decoder.decode(resource_spans.resource.attributes) == {"service.name": "svc"}


def test_decoder_last_duplicate_wins_and_cache_stays_bounded() -> None:
    decoder = AttributeDecoder(max_bytes=1_000)
    encodings = [kv.SerializeToString() for kv in key_values({f"k{i}": i for i in range(10)})]
    duplicate = KeyValue(key="k0", value=key_values({"x": "last"})[0].value).SerializeToString()
    assert decoder.decode([*encodings, duplicate])["k0"] == "last"
    assert decoder.cached_bytes <= 1_000 and len(decoder) < 10
    # Decoding again after eviction gives the same values.
    assert decoder.decode(encodings) == {f"k{i}": i for i in range(10)}


def test_decoder_raises_decode_error_for_a_broken_attribute() -> None:
    with pytest.raises(DecodeError):
        AttributeDecoder().decode([b"\x0a\x05ab"])  # key length 5, only 2 bytes follow


def test_a_key_whose_values_never_repeat_stops_filling_the_cache() -> None:
    decoder = AttributeDecoder()
    common = key_values({"gen_ai.request.model": "m"})[0].SerializeToString()
    unique = [key_values({"tokens": i})[0].SerializeToString() for i in range(MAX_KEY_MISSES + 500)]
    for i, encoding in enumerate(unique):
        assert decoder.decode([common, encoding]) == {"gen_ai.request.model": "m", "tokens": i}
    # The common encoding and the first MAX_KEY_MISSES token counts; the rest decoded only.
    assert len(decoder) == 1 + MAX_KEY_MISSES
    assert decoder.decode([unique[-1]]) == {"tokens": len(unique) - 1}
    assert len(decoder) == 1 + MAX_KEY_MISSES
