"""OTLP/HTTP bodies: content encodings, protobuf and OTLP/JSON (docs/ingest.md).

Decoding is two steps that can be fed and checked alone:

1. :class:`BodyReader` takes the raw body chunk by chunk and undoes ``Content-Encoding``
   (gzip, deflate, identity) as a stream, never holding more than the limits allow:
   16 MiB compressed, 64 MiB decompressed, so a decompression bomb stops at the limit.
2. :func:`decode_request` turns the payload into an ``ExportTraceServiceRequest`` from
   ``application/x-protobuf`` or ``application/json``.

OTLP/JSON differs from the canonical protobuf JSON mapping (OTLP spec, "JSON Protobuf
Encoding"): trace and span ids are hex strings, not base64; field names are lowerCamelCase;
enums are integers; unknown fields are ignored. Int64 as string or number is accepted by
the protobuf JSON parser already. Responses are encoded like the request.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from collections.abc import Callable
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tpmledger.ingest.error_taxonomy import PayloadTooLarge, UndecodableBody, UnsupportedMediaType

MAX_COMPRESSED_BYTES = 16 * 1024 * 1024
MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_MEDIA_TYPES = {PROTOBUF: PROTOBUF, "application/protobuf": PROTOBUF, JSON: JSON}
_CHUNK_OUT = 1024 * 1024  # decompress at most this much per step
# Id fields that OTLP/JSON writes as hex (spans and their links), in both spellings.
_HEX_ID_KEYS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


def media_type(content_type: str | None) -> str:
    """The supported media type named by a ``Content-Type`` header, or 415."""
    base = (content_type or "").split(";", 1)[0].strip().lower()
    if base not in _MEDIA_TYPES:
        raise UnsupportedMediaType(
            f"unsupported Content-Type {content_type!r}: use {PROTOBUF} or {JSON}"
        )
    return _MEDIA_TYPES[base]


class BodyReader:
    """Streaming ``Content-Encoding`` decoder with size limits (413 past them).

    ``on_growth`` is told the decoded bytes held before each piece is added (it may
    refuse by raising): :meth:`ingest.body_budget.BodyCharge.grow_to` charges them.
    """

    def __init__(
        self,
        content_encoding: str | None,
        *,
        max_compressed: int = MAX_COMPRESSED_BYTES,
        max_decompressed: int = MAX_DECOMPRESSED_BYTES,
        on_growth: Callable[[int], None] | None = None,
    ) -> None:
        encoding = (content_encoding or "identity").strip().lower()
        if encoding not in ("", "identity", "gzip", "x-gzip", "deflate"):
            raise UnsupportedMediaType(
                f"unsupported Content-Encoding {content_encoding!r}: use gzip, deflate or identity"
            )
        self._encoding = "gzip" if encoding == "x-gzip" else encoding or "identity"
        self._max_compressed = max_compressed
        self._max_decompressed = max_decompressed
        self._received = 0
        self._out = bytearray()
        self._decompressor: Any = None
        self._on_growth = on_growth

    def feed(self, chunk: bytes) -> None:
        """Take the next piece of the body as it came off the wire."""
        self._received += len(chunk)
        if self._received > self._max_compressed:
            raise PayloadTooLarge(f"body over {self._max_compressed} bytes")
        if self._encoding == "identity":
            self._append(chunk)
            return
        if self._decompressor is None:
            if not chunk:
                return
            self._decompressor = self._new_decompressor(chunk)
        self._decompress(chunk)

    def finish(self) -> bytearray:
        """The whole decoded payload; 400 if a compressed stream ended early."""
        if self._encoding != "identity":
            if self._decompressor is not None:
                try:
                    self._append(self._decompressor.flush())
                except zlib.error as exc:
                    raise UndecodableBody(f"invalid {self._encoding} data: {exc}") from exc
            if self._decompressor is None or not self._decompressor.eof:
                raise UndecodableBody(f"truncated or empty {self._encoding} body")
        return self._out

    def discard(self) -> None:
        """Drop what was decoded so far (a refused body): an exception's traceback keeps
        the reader alive until the cyclic collector runs, which ingest makes rare."""
        self._out = bytearray()
        self._decompressor = None

    def _new_decompressor(self, first: bytes) -> Any:
        if self._encoding == "gzip":
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        # HTTP "deflate" is zlib-wrapped (RFC 9110), but some senders send raw deflate.
        looks_zlib = (
            len(first) >= 2 and first[0] & 0x0F == 8 and (first[0] << 8 | first[1]) % 31 == 0
        )
        return zlib.decompressobj(zlib.MAX_WBITS if looks_zlib else -zlib.MAX_WBITS)

    def _decompress(self, data: bytes) -> None:
        try:
            while data:
                if self._decompressor.eof:
                    # Concatenated gzip members are one body (RFC 1952 §2.2).
                    if self._encoding != "gzip":
                        raise UndecodableBody("data after the end of the deflate stream")
                    self._decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
                room = self._max_decompressed - len(self._out) + 1
                self._append(self._decompressor.decompress(data, min(_CHUNK_OUT, room)))
                data = self._decompressor.unconsumed_tail or self._decompressor.unused_data
        except zlib.error as exc:
            raise UndecodableBody(f"invalid {self._encoding} data: {exc}") from exc

    def _append(self, data: bytes) -> None:
        held = len(self._out) + len(data)
        if held > self._max_decompressed:
            raise PayloadTooLarge(f"decompressed body over {self._max_decompressed} bytes")
        if self._on_growth is not None and data:
            self._on_growth(held)
        self._out += data


def decode_request(payload: bytes | bytearray, media: str) -> ExportTraceServiceRequest:
    """Parse a decoded body of the given media type (from :func:`media_type`); 400 if bad."""
    request = ExportTraceServiceRequest()
    if media == PROTOBUF:
        try:
            request.ParseFromString(payload)
        except (DecodeError, RecursionError, ValueError) as exc:
            raise UndecodableBody(f"invalid protobuf ExportTraceServiceRequest: {exc}") from exc
        return request
    try:
        document = json.loads(payload)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise UndecodableBody(f"invalid JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise UndecodableBody("OTLP/JSON body must be a JSON object")
    _hex_ids_to_base64(document)
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except (json_format.ParseError, RecursionError, ValueError, TypeError) as exc:
        raise UndecodableBody(f"invalid OTLP/JSON ExportTraceServiceRequest: {exc}") from exc
    return request


def _hex_ids_to_base64(document: dict[str, Any]) -> None:
    """Rewrite OTLP/JSON hex ids in place into the base64 the protobuf JSON parser expects."""
    for resource_spans in _dicts(document.get("resourceSpans", document.get("resource_spans"))):
        scopes = resource_spans.get("scopeSpans", resource_spans.get("scope_spans"))
        for scope_spans in _dicts(scopes):
            for span in _dicts(scope_spans.get("spans")):
                _convert_ids(span)
                for link in _dicts(span.get("links")):
                    _convert_ids(link)


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _convert_ids(obj: dict[str, Any]) -> None:
    for key in _HEX_ID_KEYS:
        value = obj.get(key)
        if isinstance(value, str):
            try:
                raw = binascii.unhexlify(value)
            except (binascii.Error, ValueError) as exc:
                raise UndecodableBody(f"{key} is not a hex string: {value[:64]!r}") from exc
            obj[key] = base64.b64encode(raw).decode("ascii")


def encode_message(message: Message, media: str) -> bytes:
    """A response message (or ``google.rpc.Status``) in the request's encoding."""
    if media == JSON:
        document = json_format.MessageToDict(message)
        return json.dumps(document, separators=(",", ":")).encode()
    return message.SerializeToString()
