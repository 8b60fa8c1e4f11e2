"""The binary COPY parser reads exactly what PostgreSQL's format holds (built here by hand
from the format's definition; the fetch tests read the real server's output)."""

from __future__ import annotations

import math
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tpmledger.storage.codecs.binary_copy import SIGNATURE, BinaryCopyError, parse_binary_copy

COLUMNS: dict[str, Any] = {"i8": "integer", "i4": "integer", "f": "float", "t": "text", "h": "hex"}


def _stream(rows: list[tuple[Any, ...]], extension: bytes = b"") -> bytes:
    out = [SIGNATURE, struct.pack(">ii", 0, len(extension)), extension]
    for i8, i4, f, t, h in rows:
        out.append(struct.pack(">h", 5))
        for value, pack in (
            (i8, lambda v: struct.pack(">q", v)),
            (i4, lambda v: struct.pack(">i", v)),
            (f, lambda v: struct.pack(">d", v)),
            (t, lambda v: v.encode()),
            (h, lambda v: v),
        ):
            if value is None:
                out.append(struct.pack(">i", -1))
            else:
                data = pack(value)
                out.append(struct.pack(">i", len(data)) + data)
    out.append(struct.pack(">h", -1))
    return b"".join(out)


ROWS = st.lists(
    st.tuples(
        st.none() | st.integers(-(2**63), 2**63 - 1),
        st.none() | st.integers(-(2**31), 2**31 - 1),
        st.none() | st.floats(allow_nan=True),
        st.none() | st.text(max_size=20),
        st.none() | st.binary(max_size=16),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(ROWS, st.binary(max_size=8))
def test_every_value_is_read_exactly(rows: list[tuple[Any, ...]], extension: bytes) -> None:
    frame = parse_binary_copy(_stream(rows, extension), COLUMNS)
    assert frame.height == len(rows)
    assert frame.get_column("i8").to_list() == [r[0] for r in rows]
    assert frame.get_column("i4").to_list() == [r[1] for r in rows]
    for got, (_, _, want, _, _) in zip(frame.get_column("f").to_list(), rows, strict=True):
        if want is None or got is None:
            assert got is want
        elif math.isnan(want):
            assert math.isnan(got)
        else:
            assert struct.pack(">d", got) == struct.pack(">d", want)  # -0.0 included
    assert frame.get_column("t").to_list() == [r[3] for r in rows]
    assert frame.get_column("h").to_list() == [None if r[4] is None else r[4].hex() for r in rows]


def test_an_empty_result_is_an_empty_frame() -> None:
    frame = parse_binary_copy(_stream([]), COLUMNS)
    assert frame.height == 0 and frame.columns == list(COLUMNS)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not a copy stream at all",
        _stream([(1, 2, 3.0, "x", b"y")])[:-2],  # no end marker
        _stream([(1, 2, 3.0, "x", b"y")])[:-9],  # cut inside a field
        _stream([(1, 2, 3.0, "x", b"y")]).replace(struct.pack(">h", 5), struct.pack(">h", 4)),
        # a 4-byte field where a double belongs
        _stream([(1, 2, 3.0, "x", b"y")]).replace(
            struct.pack(">i", 8) + struct.pack(">d", 3.0), struct.pack(">i", 4) + b"\0" * 4
        ),
        # a field length below -1 (only -1, NULL, is negative)
        _stream([(1, 2, 3.0, None, b"y")]).replace(struct.pack(">i", -1), struct.pack(">i", -7)),
        # a text field claiming more bytes than the stream holds
        _stream([(1, 2, 3.0, "x", b"y")]).replace(
            struct.pack(">i", 1) + b"x", struct.pack(">i", 10_000) + b"x"
        ),
        # bytes after the trailer
        _stream([(1, 2, 3.0, "x", b"y")]) + b"\0",
        # an extension length pointing past the end
        SIGNATURE + struct.pack(">ii", 0, 1_000) + struct.pack(">h", -1),
        # text that is not UTF-8
        _stream([(1, 2, 3.0, "x", b"y")]).replace(b"x", b"\xff"),
    ],
)
def test_a_malformed_stream_is_refused(data: bytes) -> None:
    with pytest.raises(BinaryCopyError):
        parse_binary_copy(data, COLUMNS)
