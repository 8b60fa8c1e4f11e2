"""OTLP ``AnyValue`` / ``KeyValue`` → plain Python values.

Ingest turns every span's attributes into a plain ``dict`` exactly once; the dict is
both the input of normalization and (as JSON) the stored ``span_attributes``.

Mapping (OTLP common.proto):
- string, bool, int, double → ``str``, ``bool``, ``int``, ``float``;
- a double that is NaN or ±infinity → the strings ``"NaN"``, ``"Infinity"``,
  ``"-Infinity"`` (as OTLP/JSON spells them), because JSON and PostgreSQL ``jsonb``
  cannot hold them;
- array → ``list``; kvlist → ``dict``; bytes → base64 text (as OTLP/JSON spells them);
- an unset value (or the profiles-only ``string_value_strindex``) → ``None``.

NUL characters are the one thing PostgreSQL text and ``jsonb`` refuse, so
:func:`strip_nul` removes them on the rare request that carries one.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

_SCALARS = frozenset({"string_value", "bool_value", "int_value"})


def non_finite_text(value: float) -> str:
    """NaN / ±infinity as OTLP/JSON spells them (JSON and jsonb cannot hold them)."""
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def any_value_to_python(value: AnyValue) -> Any:
    """Convert one OTLP ``AnyValue`` into a JSON-compatible Python value."""
    kind = value.WhichOneof("value")
    if kind in _SCALARS:
        return getattr(value, kind)
    if kind == "double_value":
        number = value.double_value
        return number if math.isfinite(number) else non_finite_text(number)
    if kind == "array_value":
        return [any_value_to_python(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return key_values_to_dict(value.kvlist_value.values)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return None


def key_values_to_dict(key_values: Iterable[KeyValue]) -> dict[str, Any]:
    """Convert repeated ``KeyValue`` into a dict; a repeated key keeps its last value.

    This is the hot path of ingest: the common scalar kinds are handled inline and only
    doubles and nested values pay for a function call.
    """
    result: dict[str, Any] = {}
    for kv in key_values:
        value = kv.value
        kind = value.WhichOneof("value")
        if kind in _SCALARS:
            result[kv.key] = getattr(value, kind)
        else:
            result[kv.key] = any_value_to_python(value)
    return result


def strip_nul(value: Any) -> Any:
    """Return ``value`` with NUL characters removed from every string and key in it."""
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, list):
        return [strip_nul(item) for item in value]
    if isinstance(value, dict):
        return {strip_nul(key): strip_nul(item) for key, item in value.items()}
    return value


# --- Typed reads of attribute values -------------------------------------------------
# Values from OTEL_RESOURCE_ATTRIBUTES always arrive as strings ("8"), and some SDKs
# send integral numbers as doubles, so the lenient readers below accept both. They return
# None for anything they cannot read: a bad optional attribute never rejects a span.


def as_text(value: Any) -> str | None:
    """A text value: strings as-is, numbers and booleans in their usual spelling."""
    if type(value) is str:
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return None


def as_int(value: Any, low: int, high: int) -> int | None:
    """An integer in ``[low, high]`` from an int, an integral double or a decimal string."""
    if type(value) is int:
        number = value
    elif type(value) is float and value.is_integer():
        number = int(value)
    elif type(value) is str:
        try:
            number = int(value.strip())
        except ValueError:
            return None
    else:
        return None
    return number if low <= number <= high else None


def as_seconds(value: Any) -> float | None:
    """A non-negative, finite duration in seconds from a number or a numeric string."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        seconds = float(value)
    elif type(value) is str:
        try:
            seconds = float(value)
        except ValueError:
            return None
    else:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0.0 else None


def as_string_list(value: Any) -> list[str] | None:
    """A list of strings from a string array or a JSON-encoded array string (vLLM)."""
    if isinstance(value, list):
        return [item if type(item) is str else str(item) for item in value]
    if type(value) is str:
        text = value.strip()
        if text.startswith("["):
            try:
                decoded = json.loads(text)
            except ValueError:
                return [value]
            if isinstance(decoded, list):
                return [item if type(item) is str else str(item) for item in decoded]
        return [value]
    return None
