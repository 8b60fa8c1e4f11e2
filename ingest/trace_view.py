"""A lean, wire-compatible view of ``ExportTraceServiceRequest`` for the hot path.

With the upb protobuf runtime every access to a nested message costs a Python object, so
walking each ``KeyValue`` / ``AnyValue`` of each span dominated normalization (about
1 µs per attribute). This view declares the same field numbers as
``opentelemetry/proto/trace/v1/trace.proto`` but keeps the repeated ``KeyValue``
attributes and the span events as raw ``bytes``. Most attribute encodings repeat across
the spans of a fleet (``gen_ai.operation.name = chat``, the model, the provider, …), so
:class:`AttributeDecoder` decodes each distinct encoding once and then answers from a
bounded cache keyed by its bytes.

Fields the normalizer does not read (trace_state, flags, links, scope, schema URLs, …)
are simply unknown fields of the view and are skipped by the parser.
"""

from __future__ import annotations

import sys
from typing import Any, Final

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import Message
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from tpmledger.ingest.attribute_values import any_value_to_python
from tpmledger.ingest.key_value_wire import read_key_value

_PACKAGE: Final = "tpmledger.trace_view"
_F = descriptor_pb2.FieldDescriptorProto
_ONE, _MANY = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED

# message → [(field, number, type, label, message type)]; numbers as in trace.proto.
_FieldSpec = tuple[str, int, int, int, str | None]
_SCHEMA: Final[dict[str, list[_FieldSpec]]] = {
    # Bytes: a description that is not UTF-8 is read leniently (ingest/failure_kinds.py).
    "Status": [("message", 2, _F.TYPE_BYTES, _ONE, None), ("code", 3, _F.TYPE_INT32, _ONE, None)],
    "Span": [
        ("trace_id", 1, _F.TYPE_BYTES, _ONE, None),
        ("span_id", 2, _F.TYPE_BYTES, _ONE, None),
        ("parent_span_id", 4, _F.TYPE_BYTES, _ONE, None),
        # Bytes, not string: a span whose name is not UTF-8 is refused alone
        # (ingest/normalize.py), instead of the parser refusing the whole request.
        ("name", 5, _F.TYPE_BYTES, _ONE, None),
        ("kind", 6, _F.TYPE_INT32, _ONE, None),
        ("start_time_unix_nano", 7, _F.TYPE_FIXED64, _ONE, None),
        ("end_time_unix_nano", 8, _F.TYPE_FIXED64, _ONE, None),
        ("attributes", 9, _F.TYPE_BYTES, _MANY, None),
        ("events", 11, _F.TYPE_BYTES, _MANY, None),
        ("status", 15, _F.TYPE_MESSAGE, _ONE, "Status"),
    ],
    "ScopeSpans": [("spans", 2, _F.TYPE_MESSAGE, _MANY, "Span")],
    "Resource": [("attributes", 1, _F.TYPE_BYTES, _MANY, None)],
    "ResourceSpans": [
        ("resource", 1, _F.TYPE_MESSAGE, _ONE, "Resource"),
        ("scope_spans", 2, _F.TYPE_MESSAGE, _MANY, "ScopeSpans"),
    ],
    "Request": [("resource_spans", 1, _F.TYPE_MESSAGE, _MANY, "ResourceSpans")],
}


def _build_request_class() -> type[Message]:
    file = descriptor_pb2.FileDescriptorProto(
        name="tpmledger_trace_view.proto", package=_PACKAGE, syntax="proto3"
    )
    for message_name, fields in _SCHEMA.items():
        message = file.message_type.add(name=message_name)
        for name, number, kind, label, type_name in fields:
            field = message.field.add(name=name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = f".{_PACKAGE}.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.Request"))


RequestView: Final = _build_request_class()


def parse_request_view(payload: bytes | bytearray) -> Any:
    """Parse serialized ``ExportTraceServiceRequest`` bytes into the lean view.

    Raises ``google.protobuf.message.DecodeError`` when the outer structure is invalid;
    an invalid attribute is only found when :class:`AttributeDecoder` decodes it.
    """
    return RequestView.FromString(payload)


#: What the attribute cache may hold, in bytes of the Python objects it keeps (issue 41:
#: bounded by entries only, 16,384 encodings of ~90 KB each grew a worker by 1.4 GB).
DEFAULT_CACHE_BYTES: Final = 8 * 1024 * 1024
#: An encoding longer than this is decoded every time, never cached: long values (prompts,
#: ids of every kind) do not repeat, and one of them would take a large share of the bound.
MAX_CACHED_ENCODING: Final = 512
#: A key whose values missed this many times since the cache was last cleared does not
#: repeat (token counts, timings, response ids): its further values are decoded and not
#: cached, so they no longer fill the cache and clear the common encodings with them.
MAX_KEY_MISSES: Final = 4096
_ENTRY_OVERHEAD: Final = 200  # the dict slot (amortized over resizes) and the entry tuple
_COMPOUND_BYTES_PER_WIRE_BYTE: Final = 64  # an upper bound for arrays and kvlists


def entry_bytes(raw: bytes, entry: tuple[str, Any]) -> int:
    """What caching ``entry`` under ``raw`` keeps alive, in bytes (an upper estimate)."""
    key, value = entry
    held = sys.getsizeof(raw) + sys.getsizeof(key) + _ENTRY_OVERHEAD
    if isinstance(value, list | dict):
        return held + _COMPOUND_BYTES_PER_WIRE_BYTE * len(raw)
    return held + sys.getsizeof(value)


class _EncodingCache(dict[bytes, tuple[str, Any]]):
    """Raw ``KeyValue`` bytes → (key, plain value); decodes on a miss, bounded in bytes."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__()
        self.max_bytes = max_bytes
        self.bytes = 0
        # key -> cacheable misses since the last clear. Every key counted has an entry
        # cached since then (its first miss is cached), so this holds fewer keys than
        # the cache holds entries.
        self.misses: dict[str, int] = {}

    def __missing__(self, raw: bytes) -> tuple[str, Any]:
        entry = read_key_value(raw)
        if entry is None:  # not one of the common short scalar shapes
            key_value = KeyValue.FromString(raw)
            entry = (key_value.key, any_value_to_python(key_value.value))
        if len(raw) > MAX_CACHED_ENCODING:
            return entry
        misses = self.misses.get(entry[0], 0) + 1
        if misses > MAX_KEY_MISSES:
            return entry  # a key whose values do not repeat: not cached
        self.misses[entry[0]] = misses
        charge = entry_bytes(raw, entry)
        if self.bytes + charge > self.max_bytes:
            # Crude but O(1) amortized: distinct encodings beyond the bound churn; the
            # common ones are back after a few spans.
            self.clear()
            self.misses.clear()
            self.misses[entry[0]] = 1
            self.bytes = 0
        self[raw] = entry
        self.bytes += charge
        return entry


class AttributeDecoder:
    """Raw ``KeyValue`` encodings → plain ``dict``, with a cache bounded in bytes."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self._cache = _EncodingCache(max_bytes)
        self._lookup = self._cache.__getitem__

    def __len__(self) -> int:
        """How many distinct encodings are cached right now."""
        return len(self._cache)

    @property
    def cached_bytes(self) -> int:
        """What the cached encodings hold, in bytes (at most the bound)."""
        return self._cache.bytes

    def decode(self, encoded: Any) -> dict[str, Any]:
        """Decode repeated raw ``KeyValue`` bytes; a repeated key keeps its last value.

        Raises ``google.protobuf.message.DecodeError`` for an undecodable attribute.
        Cached values are shared between spans: callers must not mutate them.
        """
        # dict(map(...)) keeps the per-attribute work in C; only cache misses run Python.
        # encoded[:] copies upb's repeated field into a list faster than iterating it.
        return dict(map(self._lookup, encoded[:]))
