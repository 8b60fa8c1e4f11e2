"""The direct KeyValue reader agrees with the protobuf runtime wherever it answers."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue

from tpmledger.ingest.attribute_values import any_value_to_python
from tpmledger.ingest.key_value_wire import read_key_value

_SCALARS = st.one_of(
    st.text(max_size=140).map(lambda s: AnyValue(string_value=s)),
    st.booleans().map(lambda b: AnyValue(bool_value=b)),
    st.integers(-(2**63), 2**63 - 1).map(lambda i: AnyValue(int_value=i)),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda f: AnyValue(double_value=f)),
    st.binary(max_size=8).map(lambda b: AnyValue(bytes_value=b)),
    st.just(AnyValue()),
)
_VALUES = _SCALARS | st.lists(_SCALARS, max_size=3).map(
    lambda items: AnyValue(array_value=ArrayValue(values=items))
)


def _reference(raw: bytes) -> tuple[str, Any]:
    key_value = KeyValue.FromString(raw)
    return key_value.key, any_value_to_python(key_value.value)


def _same(left: tuple[str, Any], right: tuple[str, Any]) -> bool:
    return type(left[1]) is type(right[1]) and repr(left) == repr(right)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(key=st.text(max_size=140), value=_VALUES)
def test_agrees_with_protobuf_on_real_encodings(key: str, value: AnyValue) -> None:
    raw = KeyValue(key=key, value=value).SerializeToString()
    fast = read_key_value(raw)
    if fast is not None:
        assert _same(fast, _reference(raw))


@settings(max_examples=600, deadline=None)
@given(
    base=st.sampled_from(
        [
            KeyValue(key="gen_ai.usage.input_tokens", value=AnyValue(int_value=1297)),
            KeyValue(key="tpmledger.queue.wait_s", value=AnyValue(double_value=0.25)),
            KeyValue(key="tpmledger.call.id", value=AnyValue(string_value="call-7")),
            KeyValue(key="retry", value=AnyValue(bool_value=True)),
            KeyValue(key="neg", value=AnyValue(int_value=-5)),
        ]
    ),
    position=st.integers(0, 40),
    replacement=st.binary(min_size=0, max_size=3),
    cut=st.integers(0, 3),
)
@pytest.mark.slow
def test_mutated_bytes_are_read_as_protobuf_reads_them_or_left_to_it(
    base: KeyValue, position: int, replacement: bytes, cut: int
) -> None:
    encoded = base.SerializeToString()
    raw = encoded[:position] + replacement + encoded[position + cut :]
    fast = read_key_value(raw)
    if fast is None:
        return
    try:
        reference = _reference(raw)
    except DecodeError:
        raise AssertionError(f"read {raw!r} that protobuf refuses") from None
    assert _same(fast, reference)


def test_the_common_shapes_take_the_direct_path() -> None:
    cases: list[tuple[str, AnyValue, Any]] = [
        ("gen_ai.usage.input_tokens", AnyValue(int_value=1297), 1297),
        ("n", AnyValue(int_value=-(2**63)), -(2**63)),
        ("n", AnyValue(int_value=0), 0),
        ("tpmledger.queue.wait_s", AnyValue(double_value=0.1811), 0.1811),
        ("d", AnyValue(double_value=float("inf")), "Infinity"),
        ("tpmledger.call.id", AnyValue(string_value="call-1a2b"), "call-1a2b"),
        ("s", AnyValue(string_value=""), ""),
        ("ok", AnyValue(bool_value=False), False),
    ]
    for key, value, expected in cases:
        raw = KeyValue(key=key, value=value).SerializeToString()
        assert read_key_value(raw) == (key, expected), key
    long_text = KeyValue(key="k", value=AnyValue(string_value="x" * 200)).SerializeToString()
    assert read_key_value(long_text) is None  # two-byte length: protobuf's job
