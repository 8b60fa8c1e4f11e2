"""PostgreSQL's binary ``COPY`` format, parsed into columns by compiled code (Numba).

The binary format (PostgreSQL docs, "COPY — Binary Format") is a header (an 11-byte
signature, 32-bit flags, a 32-bit extension length and the extension), then per row a
16-bit field count and per field a 32-bit length (−1 for NULL) followed by that many
bytes, and a field count of −1 at the end; every number is big-endian. The server
produces it with less work than CSV (no number formatting, ids as raw bytes), and it is
parsed here in two passes over the bytes: one measures, one fills the columns.

Column kinds: integers (2, 4 or 8 bytes, as the field's length says), 8-byte floats,
text (UTF-8; connections pin ``client_encoding``, and the bytes are validated) and bytea
read as lowercase hex text (ids). A stream that is not exactly that (a field length below
−1 or past the end, bytes after the trailer) is refused before any column is filled.
"""

from __future__ import annotations

from typing import Literal

import numba
import numpy as np
import numpy.typing as npt
import polars as pl
import pyarrow as pa

INTEGER, FLOAT, TEXT, HEX = 0, 1, 2, 3
Kind = Literal["integer", "float", "text", "hex"]
_KIND_CODES = {"integer": INTEGER, "float": FLOAT, "text": TEXT, "hex": HEX}
SIGNATURE = b"PGCOPY\n\xff\r\n\x00"

Ints = npt.NDArray[np.int64]
Bytes = npt.NDArray[np.uint8]
Bools = npt.NDArray[np.bool_]

_kernel = numba.njit(nogil=True, cache=True)


class BinaryCopyError(ValueError):
    """The bytes are not the binary COPY stream of the expected columns."""


@_kernel
def _int16(buffer: Bytes, at: int) -> int:
    value = (np.int64(buffer[at]) << 8) | np.int64(buffer[at + 1])
    return int(value - 65536 if value >= 32768 else value)


@_kernel
def _int32(buffer: Bytes, at: int) -> int:
    value = (
        (np.int64(buffer[at]) << 24)
        | (np.int64(buffer[at + 1]) << 16)
        | (np.int64(buffer[at + 2]) << 8)
        | np.int64(buffer[at + 3])
    )
    return int(value - 4294967296 if value >= 2147483648 else value)


@_kernel
def _uint64(buffer: Bytes, at: int) -> np.uint64:
    value = np.uint64(0)
    for k in range(8):
        value = (value << np.uint64(8)) | np.uint64(buffer[at + k])
    return value


@_kernel
def _signed(buffer: Bytes, at: int, size: int) -> int:
    """A big-endian two's-complement integer of 2, 4 or 8 bytes."""
    if size == 8:
        return int(np.int64(_uint64(buffer, at)))  # wraps to the sign by itself
    return _int32(buffer, at) if size == 4 else _int16(buffer, at)


@_kernel
def _scan(buffer: Bytes, kinds: npt.NDArray[np.int8]) -> tuple[int, int, Ints]:
    """(first row's position, rows, text bytes per column); rows < 0 if malformed."""
    columns = kinds.size
    text_bytes = np.zeros(columns, np.int64)
    if buffer.size < 21:
        return 0, -1, text_bytes
    position = 19 + _int32(buffer, 15)
    if position < 19 or position > buffer.size:
        return 0, -1, text_bytes
    first = position
    rows = 0
    while True:
        if position + 2 > buffer.size:
            return first, -1, text_bytes
        fields = _int16(buffer, position)
        position += 2
        if fields == -1:
            # The trailer ends the stream: anything after it is not COPY data.
            return first, rows if position == buffer.size else -1, text_bytes
        if fields != columns:
            return first, -1, text_bytes
        for column in range(columns):
            if position + 4 > buffer.size:
                return first, -1, text_bytes
            size = _int32(buffer, position)
            position += 4
            kind = kinds[column]
            if size < -1 or position + size > buffer.size:
                return first, -1, text_bytes
            if size >= 0 and (
                (kind == INTEGER and size not in (2, 4, 8)) or (kind == FLOAT and size != 8)
            ):
                return first, -1, text_bytes
            if size > 0:
                text_bytes[column] += 2 * size if kind == HEX else size
                position += size
        rows += 1


@_kernel
def _hex_pairs() -> npt.NDArray[np.uint16]:
    """Per byte value, its two lowercase hex digits as one little-endian uint16."""
    digits = np.empty(16, np.uint16)
    for k in range(16):
        digits[k] = ord("0") + k if k < 10 else ord("a") + k - 10
    pairs = np.empty(256, np.uint16)
    for value in range(256):
        pairs[value] = digits[value >> 4] | (digits[value & 15] << 8)
    return pairs


@_kernel
def _fill(
    buffer: Bytes,
    kinds: npt.NDArray[np.int8],
    slots: Ints,
    counts: Ints,
    first: int,
    rows: int,
    text_bytes: Ints,
) -> tuple[Ints, npt.NDArray[np.float64], Ints, Bytes, npt.NDArray[np.uint16], Bools]:
    """Row-major (rows, columns of the kind) integers, floats and text offsets, the
    text bytes and the hex text (as uint16 digit pairs), and validity (rows, columns).

    Text (and hex) columns are laid out column after column in their buffer; each
    kind's columns are numbered by ``slots``. Rows are written side by side, so every
    row touches one stretch of memory per array.
    """
    columns = kinds.size
    integers = np.zeros((rows, counts[INTEGER]), np.int64)
    floats = np.zeros((rows, counts[FLOAT]), np.float64)
    offsets = np.zeros((rows + 1, counts[TEXT]), np.int64)
    valid = np.zeros((rows, columns), np.bool_)
    bases = np.zeros(columns, np.int64)  # where each text / hex column starts
    text_total, hex_total = 0, 0
    for column in range(columns):
        if kinds[column] == TEXT:
            bases[column] = text_total
            text_total += text_bytes[column]
        elif kinds[column] == HEX:
            bases[column] = hex_total
            hex_total += text_bytes[column] // 2  # in digit pairs
    text = np.empty(text_total, np.uint8)
    hexes = np.empty(hex_total, np.uint16)
    cursor = bases.copy()
    pairs = _hex_pairs()
    bits = np.empty(1, np.uint64)
    as_double = bits.view(np.float64)
    position = first
    for row in range(rows):
        position += 2
        for column in range(columns):
            size = _int32(buffer, position)
            position += 4
            kind, slot = kinds[column], slots[column]
            if size >= 0:
                valid[row, column] = True
                at = cursor[column]
                if kind == INTEGER:
                    integers[row, slot] = _signed(buffer, position, size)
                elif kind == FLOAT:
                    bits[0] = _uint64(buffer, position)
                    floats[row, slot] = as_double[0]
                elif kind == TEXT:
                    for k in range(size):
                        text[at + k] = buffer[position + k]
                    cursor[column] = at + size
                else:
                    for k in range(size):
                        hexes[at + k] = pairs[buffer[position + k]]
                    cursor[column] = at + size
                position += size
            if kind == TEXT:
                offsets[row + 1, slot] = cursor[column] - bases[column]
            elif kind == HEX:
                offsets[row + 1, slot] = 2 * (cursor[column] - bases[column])
    return integers, floats, offsets, text, hexes, valid


def _text_series(
    name: str, rows: int, offsets: Ints, data: Bytes, valid: Bools, *, check_utf8: bool
) -> pl.Series:
    nulls = int(rows - valid.sum())
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    array = pa.LargeStringArray.from_buffers(
        rows, pa.py_buffer(np.ascontiguousarray(offsets)), pa.py_buffer(data), bitmap, nulls
    )
    if check_utf8:
        try:
            array.validate(full=True)  # offsets in order and every value valid UTF-8
        except pa.ArrowInvalid as exc:
            raise BinaryCopyError(f"column {name}: {exc}") from exc
    return pl.Series(name, array, dtype=pl.String)


def parse_binary_copy(
    buffer: bytes | bytearray | memoryview, columns: dict[str, Kind]
) -> pl.DataFrame:
    """The rows of a binary ``COPY … TO STDOUT`` stream as a frame of ``columns``
    (name → kind, in COPY order): Int64, Float64 or String columns."""
    raw = np.frombuffer(buffer, dtype=np.uint8)
    if raw.size < len(SIGNATURE) or raw[: len(SIGNATURE)].tobytes() != SIGNATURE:
        raise BinaryCopyError("not a binary COPY stream (signature missing)")
    kinds = np.array([_KIND_CODES[kind] for kind in columns.values()], dtype=np.int8)
    # Each column's index among the columns stored like it (text and hex share one).
    stored_as = [TEXT if k == HEX else int(k) for k in kinds]
    slots = np.array([stored_as[:i].count(k) for i, k in enumerate(stored_as)], dtype=np.int64)
    counts = np.array([stored_as.count(k) for k in (INTEGER, FLOAT, TEXT)], dtype=np.int64)
    first, rows, text_bytes = _scan(raw, kinds)
    if rows < 0:
        raise BinaryCopyError(f"binary COPY stream does not hold rows of {len(columns)} fields")
    integers, floats, offsets, text, hexes, valid = _fill(
        raw, kinds, slots, counts, first, rows, text_bytes
    )
    digits = hexes.view(np.uint8)
    text_at = hex_at = 0
    series: list[pl.Series] = []
    for i, (name, kind) in enumerate(columns.items()):
        slot, present = int(slots[i]), valid[:, i]
        if kind == "integer":
            values = pa.array(integers[:, slot], mask=~present, type=pa.int64())
            series.append(pl.Series(name, values, dtype=pl.Int64))
        elif kind == "float":
            values = pa.array(floats[:, slot], mask=~present, type=pa.float64())
            series.append(pl.Series(name, values, dtype=pl.Float64))
        elif kind == "text":
            own = text[text_at : text_at + text_bytes[i]]
            text_at += int(text_bytes[i])
            series.append(_text_series(name, rows, offsets[:, slot], own, present, check_utf8=True))
        else:
            own = digits[hex_at : hex_at + text_bytes[i]]
            hex_at += int(text_bytes[i])
            # Hex digits are written here, always ASCII.
            series.append(
                _text_series(name, rows, offsets[:, slot], own, present, check_utf8=False)
            )
    return pl.DataFrame(series)
