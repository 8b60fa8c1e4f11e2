"""A direct reader for the common shapes of one encoded OTLP ``KeyValue``.

Most attribute encodings repeat and are answered from the decoder's cache
(:mod:`ingest.trace_view`), but every span also carries a few that never repeat — its
call id, token counts, durations. Decoding those through the protobuf runtime costs a
message object, a oneof lookup and an attribute read each (about 2 µs on the 2-core
benchmark machine); reading the bytes directly costs about half.

:func:`read_key_value` handles exactly one shape: a short key (field 1) followed by a
short ``AnyValue`` (field 2) holding exactly one string, bool, int or double. For
anything else — longer lengths, arrays, kvlists, bytes, unknown or repeated fields,
invalid UTF-8, trailing bytes — it returns ``None`` and the caller uses the protobuf
runtime, which stays the reference (the tests compare both on generated encodings).
"""

from __future__ import annotations

import math
import struct
from typing import Any, Final

from tpmledger.ingest.attribute_values import non_finite_text

_KEY_TAG: Final = 0x0A  # field 1, length-delimited
_VALUE_TAG: Final = 0x12  # field 2, length-delimited
_STRING: Final = 0x0A  # AnyValue.string_value
_BOOL: Final = 0x10  # AnyValue.bool_value (varint)
_INT: Final = 0x18  # AnyValue.int_value (varint, two's complement int64)
_DOUBLE: Final = 0x21  # AnyValue.double_value (fixed64)
_read_double: Final = struct.Struct("<d").unpack_from


def read_key_value(raw: bytes) -> tuple[str, Any] | None:
    """``(key, plain value)`` of an encoded ``KeyValue``, or ``None`` for "use protobuf"."""
    try:
        return _read(raw)
    except IndexError:  # truncated: let protobuf say what is wrong
        return None


def _read(raw: bytes) -> tuple[str, Any] | None:
    size = len(raw)
    if size < 4 or raw[0] != _KEY_TAG:
        return None
    key_end = 2 + raw[1]
    if raw[1] > 0x7F or key_end + 3 > size or raw[key_end] != _VALUE_TAG:
        return None
    body = key_end + 2
    value_size = raw[key_end + 1]
    if value_size > 0x7F or value_size != size - body:  # one-byte length, ends the encoding
        return None
    try:
        key = raw[2:key_end].decode()
    except UnicodeDecodeError:
        return None
    tag = raw[body]
    if tag == _STRING:
        length = raw[body + 1]
        if length > 0x7F or length != size - body - 2:
            return None
        try:
            return key, raw[body + 2 :].decode()
        except UnicodeDecodeError:
            return None
    if tag == _DOUBLE:
        if size - body != 9:
            return None
        number = _read_double(raw, body + 1)[0]
        return key, number if math.isfinite(number) else non_finite_text(number)
    if tag in (_INT, _BOOL):
        value = 0
        shift = 0
        position = body + 1
        while position < size:
            byte = raw[position]
            value |= (byte & 0x7F) << shift
            position += 1
            if byte < 0x80:
                break
            shift += 7
        else:
            return None  # truncated varint
        if position != size or shift > 63 or value >= 1 << 64:
            return None
        if tag == _BOOL:
            return (key, value != 0) if value <= 1 else None
        return key, value - (1 << 64) if value >= 1 << 63 else value
    return None
