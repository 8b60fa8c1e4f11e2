"""Python values as OTLP attributes: the one builder the tests and the benchmarks share.

Standard library and the OTLP protobuf classes only, so a benchmark can use it without
loading the code it measures.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList


def any_value(value: Any) -> AnyValue:
    """A Python value as an OTLP AnyValue (bool before int: bool is an int)."""
    if isinstance(value, AnyValue):
        return value
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, list):
        return AnyValue(array_value=ArrayValue(values=[any_value(v) for v in value]))
    if isinstance(value, dict):
        return AnyValue(kvlist_value=KeyValueList(values=key_values(value)))
    return AnyValue(string_value=str(value))


def key_values(attributes: Mapping[str, Any]) -> list[KeyValue]:
    """A mapping as repeated OTLP KeyValue."""
    return [KeyValue(key=k, value=any_value(v)) for k, v in attributes.items()]


def key_value(key: str, value: Any) -> KeyValue:
    """One OTLP attribute."""
    return KeyValue(key=key, value=any_value(value))
