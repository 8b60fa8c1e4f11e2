"""AnyValue → plain values, and the lenient typed readers of optional attributes."""

from __future__ import annotations

import math
from typing import Any

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.otlp_values import any_value
from tpmledger.ingest.attribute_values import (
    any_value_to_python,
    as_int,
    as_seconds,
    as_string_list,
    as_text,
    strip_nul,
)


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        ("s", "s"),
        (True, True),
        (-3, -3),
        (2.5, 2.5),
        (math.inf, "Infinity"),
        (b"\xff", "/w=="),
        ([1, ["a"]], [1, ["a"]]),
        ({"k": {"n": 1.0}}, {"k": {"n": 1.0}}),
    ],
)
def test_any_value_to_python(value: Any, plain: Any) -> None:
    assert any_value_to_python(any_value(value)) == plain


def test_unset_any_value_is_none() -> None:
    assert any_value_to_python(AnyValue()) is None
    assert any_value_to_python(AnyValue(double_value=math.nan)) == "NaN"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (8, 8),
        (8.0, 8),
        (" 8 ", 8),
        ("8.5", None),
        (8.5, None),
        (True, None),
        (0, None),
        (2**40, None),
        (None, None),
        ([8], None),
    ],
)
def test_as_int_accepts_ints_integral_doubles_and_decimal_strings(
    value: Any, expected: Any
) -> None:
    assert as_int(value, 1, 2**31 - 1) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.5, 0.5),
        (2, 2.0),
        ("0.25", 0.25),
        (-0.1, None),
        ("x", None),
        (True, None),
        ("NaN", None),
        (math.inf, None),
        (None, None),
    ],
)
def test_as_seconds(value: Any, expected: Any) -> None:
    assert as_seconds(value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (["stop"], ["stop"]),
        ('["stop", "length"]', ["stop", "length"]),
        ("stop", ["stop"]),
        ("[not json", ["[not json"]),
        ([1], ["1"]),
        ('"stop"', ['"stop"']),
        (3, None),
    ],
)
def test_as_string_list(value: Any, expected: Any) -> None:
    assert as_string_list(value) == expected


def test_as_text_and_strip_nul() -> None:
    assert [as_text(v) for v in ("a", 3, 1.5, False, None, [1])] == [
        "a",
        "3",
        "1.5",
        "false",
        None,
        None,
    ]
    assert strip_nul({"k\x00": ["a\x00b", {"c": "\x00"}], "n": 1}) == {
        "k": ["ab", {"c": ""}],
        "n": 1,
    }
