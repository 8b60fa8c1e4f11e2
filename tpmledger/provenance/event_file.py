"""The canonical event file (docs/provenance.md): one RFC 8785 (JCS) JSON object per line.

Lines are ordered by (end_ns, trace_id, span_id) and end with ``\\n``; every line has
exactly the keys of :data:`EVENT_SCHEMA` (already in JCS order), nanosecond times are
decimal strings and absent values are ``null``. ``events_sha256`` is the SHA-256 of the
file's bytes, so ``sha256sum events.jsonl`` reproduces it.

The writer is vectorised: the key set is fixed and sorted, so each line is the same
literal key text around per-column values (:mod:`provenance.event_values`), written in
canonical order (one integer argsort) straight into one buffer by compiled code
(:mod:`provenance.line_writer`). Tests prove the bytes identical to ``rfc8785.dumps``
of each record.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Protocol

import numpy as np
import polars as pl
import pyarrow as pa
import rfc8785

from tpmledger.durations import MINUTE_NS  # a leaf: provenance stays loadable alone
from tpmledger.provenance.event_schema import (
    EVENT_COLUMNS,
    EVENT_SCHEMA,
    EVENTS_FORMAT,
    NS_COLUMNS,
    ORDER_COLUMNS,
)
from tpmledger.provenance.event_values import constant_texts, value_fields
from tpmledger.provenance.line_writer import INTEGER, TEXT, LineLayout, write_file

__all__ = [
    "EVENTS_FORMAT",
    "EVENT_COLUMNS",
    "EVENT_SCHEMA",
    "NS_COLUMNS",
    "ORDER_COLUMNS",
    "EventFile",
    "FileDigestStream",
    "FileDigests",
    "build_event_file",
    "canonical_order",
    "file_digests",
    "in_canonical_order",
    "read_events",
]


@dataclass(frozen=True)
class EventFile:
    """The file's bytes, where each line starts (for per-minute hashing) and its digest."""

    data: memoryview
    count: int
    # offsets[i] is the byte where line i starts; offsets[count] == len(data).
    offsets: pl.Series

    @cached_property
    def sha256(self) -> str:
        """``events_sha256``: hex SHA-256 of the whole file (computed once, on first use)."""
        return hashlib.sha256(self.data).hexdigest()

    def slice_sha256(self, first_line: int, end_line: int) -> str:
        """SHA-256 of lines ``first_line`` (inclusive) to ``end_line`` (exclusive)."""
        start, end = int(self.offsets[first_line]), int(self.offsets[end_line])
        return hashlib.sha256(self.data[start:end]).hexdigest()

    def tobytes(self) -> bytes:
        return bytes(self.data)


def _after_previous(name: str, or_equal: bool) -> pl.Expr:
    column, previous = pl.col(name), pl.col(name).shift(1)
    return column >= previous if or_equal else column > previous


def in_canonical_order(events: pl.DataFrame) -> bool:
    """True when every line already follows its predecessor by (end_ns, trace_id, span_id).

    One vectorised pass over neighbouring rows (much cheaper than sorting); frames with a
    null in an order column are reported unordered and simply get sorted.
    """
    if events.select(pl.any_horizontal(pl.col(ORDER_COLUMNS).is_null().any())).item():
        return False
    end, trace = pl.col("end_ns"), pl.col("trace_id")
    same_end = end == end.shift(1)
    same_trace = trace == trace.shift(1)
    follows = _after_previous("end_ns", False) | (
        same_end
        & (_after_previous("trace_id", False) | (same_trace & _after_previous("span_id", True)))
    )
    return bool(events.select(follows.fill_null(True).all()).item())


def _order_by_end(typed: pl.DataFrame) -> np.ndarray | None:
    """Row order by (end_ns, trace_id, span_id), or None when already in that order.

    One integer argsort of ``end_ns`` (NumPy); only rows that share an ``end_ns`` with a
    neighbour are ordered by the id strings, as a small Polars sort. (A three-key sort
    with two string keys cost ~0.3 s per million events.)
    """
    end = typed.get_column("end_ns").to_numpy()
    order = None if bool(np.all(end[1:] >= end[:-1])) else np.argsort(end)
    ends = end if order is None else end[order]
    tied = ends[1:] == ends[:-1]
    if not tied.any():
        return order
    in_tie = np.zeros(ends.size, dtype=np.bool_)
    in_tie[1:] |= tied
    in_tie[:-1] |= tied
    positions = np.flatnonzero(in_tie)
    rows = positions if order is None else order[positions]
    ties = typed.select(ORDER_COLUMNS)[rows].with_columns(
        _at=pl.int_range(0, len(rows)), _row=pl.Series(rows)
    )
    # Identical keys keep their input order (a stable sort), as a reference sort would.
    settled = ties.sort([*ORDER_COLUMNS, "_row"]).get_column("_at").to_numpy()
    if order is None and bool(np.all(settled[1:] > settled[:-1])):
        return None
    order = np.arange(ends.size) if order is None else order
    # The tie groups keep their places; within them, rows take the settled order.
    order[positions] = rows[settled]
    return order


def _typed(events: pl.DataFrame) -> pl.DataFrame:
    return events.select([pl.col(name).cast(dtype) for name, dtype in EVENT_SCHEMA.items()])


def _line_order(typed: pl.DataFrame) -> tuple[pl.DataFrame, np.ndarray | None]:
    """The frame (sorted only if an order key is null) and its canonical row order."""
    if typed.height < 2:
        return typed, None
    if typed.select(pl.any_horizontal(pl.col(ORDER_COLUMNS).is_null().any())).item():
        return typed.sort(ORDER_COLUMNS, maintain_order=True), None  # nulls first
    return typed, _order_by_end(typed)


def canonical_order(events: pl.DataFrame) -> pl.DataFrame:
    """Events with exactly the canonical columns and types, in canonical line order.

    Already ordered input is recognised in one pass and returned as is.
    """
    typed, order = _line_order(_typed(events))
    return typed if order is None else typed[order]


# RFC 8785 numbers are IEEE doubles: integers beyond this are refused (as rfc8785 does).
JSON_SAFE_INTEGER = 2**53 - 1


def _refuse_unsafe_integers(events: pl.DataFrame) -> None:
    """Raise ``rfc8785.IntegerDomainError`` for a JSON-number integer a double cannot
    hold exactly (nanosecond times are decimal strings and may use all of int64)."""
    names = [n for n, t in EVENT_SCHEMA.items() if t == pl.Int64() and n not in NS_COLUMNS]
    if events.height == 0:
        return
    extremes = events.select(
        *(pl.col(n).min().alias(f"{n}_min") for n in names),
        *(pl.col(n).max().alias(f"{n}_max") for n in names),
    ).row(0)
    for value in extremes:
        if value is not None and abs(value) > JSON_SAFE_INTEGER:
            raise rfc8785.IntegerDomainError(value)


def _text_buffers(texts: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Offsets (columns, rows + 1) into one byte buffer, the buffer, and validity."""
    rows = texts.height
    offsets = np.empty((texts.width, rows + 1), dtype=np.int64)
    valid = np.empty((texts.width, rows), dtype=np.bool_)
    parts: list[np.ndarray] = []
    cursor = 0
    for i, series in enumerate(texts.get_columns()):
        array = series.to_arrow(compat_level=pl.CompatLevel.oldest())
        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks()
        array = array.cast(pa.large_string())
        _, offsets_buffer, data_buffer = array.buffers()
        own = np.frombuffer(offsets_buffer, dtype=np.int64)[array.offset : array.offset + rows + 1]
        start, end = int(own[0]), int(own[-1])
        if data_buffer is not None and end > start:
            parts.append(np.frombuffer(data_buffer, dtype=np.uint8)[start:end])
        offsets[i] = own - start + cursor
        cursor += end - start
        valid[i] = series.is_not_null().to_numpy()
    data = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)
    return offsets, data, valid


def _layout(frame: pl.DataFrame) -> LineLayout:
    """Template and value columns of the lines of ``frame`` (canonical columns).

    Keys are fixed and sorted, so the literal key text is the same on every line;
    columns constant over the run are folded into it.
    """
    constants = constant_texts(frame)
    frame, fields = value_fields(frame, constants)
    literal, starts = bytearray(), [0]
    kinds, slots, quoted = [], [], []
    texts: list[pl.Expr] = []
    integers: list[pl.Expr] = []
    glue = "{"
    for field in fields:
        literal += f'{glue}"{field.name}":'.encode()
        glue = ","
        if field.kind == "constant":
            literal += constants[field.name].encode()
            continue
        starts.append(len(literal))
        into = texts if field.kind == "text" else integers
        kinds.append(TEXT if field.kind == "text" else INTEGER)
        slots.append(len(into))
        quoted.append(field.quoted)
        into.append(field.column.alias(f"v{len(into)}"))
    literal += b"}\n"
    starts.append(len(literal))
    text_offsets, text_data, text_valid = _text_buffers(frame.select(texts))
    numbers = frame.select(integers)
    int_values = np.empty((numbers.width, frame.height), dtype=np.int64)
    int_valid = np.empty((numbers.width, frame.height), dtype=np.bool_)
    for i, series in enumerate(numbers.get_columns()):
        int_values[i] = series.fill_null(0).to_numpy()
        int_valid[i] = series.is_not_null().to_numpy()
    return LineLayout(
        literal=np.frombuffer(bytes(literal), dtype=np.uint8),
        literal_starts=np.array(starts, dtype=np.int64),
        kinds=np.array(kinds, dtype=np.int8),
        slots=np.array(slots, dtype=np.int64),
        quoted=np.array(quoted, dtype=np.bool_),
        text_offsets=text_offsets,
        text_data=text_data,
        text_valid=text_valid,
        int_values=int_values,
        int_valid=int_valid,
    )


def build_event_file(events: pl.DataFrame) -> EventFile:
    """The canonical file of ``events`` (any order, canonical columns) with its digest.

    Value columns are prepared column at a time (:mod:`provenance.event_values`) and the
    lines are written in canonical order straight into one buffer by compiled code
    (:mod:`provenance.line_writer`): no per-line object is made.
    """
    _refuse_unsafe_integers(events)
    frame, order = _line_order(_typed(events))
    if frame.height == 0:
        return EventFile(memoryview(b""), 0, pl.Series([0], dtype=pl.Int64))
    rows = np.arange(frame.height, dtype=np.int64) if order is None else order.astype(np.int64)
    data, offsets = write_file(_layout(frame), rows)
    return EventFile(data=data.data, count=frame.height, offsets=pl.Series(offsets))


@dataclass(frozen=True)
class FileDigests:
    """What a seal needs of the canonical file, without holding it: its SHA-256 and line
    count, and the SHA-256 of each minute's lines (first minute to last, empty ones
    included: ``counts[i]`` lines in minute ``first_minute_ns + i`` minutes)."""

    sha256: str
    count: int
    first_minute_ns: int
    counts: list[int]
    digests: list[str]


#: Lines written (and their column buffers laid out) at a time by :func:`file_digests`:
#: whole minutes while they fit, and a busier minute in slices of this many lines (at
#: ~500 bytes a line, ~32 MB of lines; a 900,000-attempt minute written whole was ~450 MB).
DIGEST_CHUNK_LINES = 65_536
#: Per-minute digests are dense (empty minutes included): callers bound a run's length
#: first (analytics/kernels/run_span_limit.py); this is a last guard against a huge allocation.
MAX_DIGEST_MINUTES = 10_000_000


def slice_bounds(bounds: np.ndarray, chunk_lines: int) -> list[tuple[int, int]]:
    """[start, stop) line ranges that :func:`file_digests` writes one at a time, given where
    each minute's lines start (``bounds``, ending with the line count): as many whole
    minutes as fit in ``chunk_lines`` lines, and a minute longer than that cut into
    slices of ``chunk_lines`` lines (a minute is hashed across its slices)."""
    total = int(bounds[-1])
    ranges: list[tuple[int, int]] = []
    start = 0
    while start < total:
        limit = start + chunk_lines
        fits = int(bounds[int(np.searchsorted(bounds, limit, side="right")) - 1])
        stop = fits if fits > start else min(limit, total)
        ranges.append((start, stop))
        start = stop
    return ranges


def file_digests(
    events: pl.DataFrame,
    chunk_lines: int = DIGEST_CHUNK_LINES,
    whole: _Updatable | None = None,
) -> FileDigests:
    """The digests of :func:`build_event_file`'s bytes, written and hashed at most
    ``chunk_lines`` lines at a time (:func:`slice_bounds`) so neither the file nor its
    column buffers are ever whole in memory, however many lines a minute holds
    (identical bytes, identical digests: SHA-256 is fed a minute's lines slice by slice).

    ``whole`` (a SHA-256 object) is updated with the bytes too: the file of a run read in
    end-time ranges is the concatenation of the ranges' files (:class:`FileDigestStream`).
    """
    _refuse_unsafe_integers(events)
    frame, order = _line_order(_typed(events))
    if frame.height == 0:
        return FileDigests(hashlib.sha256(b"").hexdigest(), 0, 0, [], [])
    ends = frame.get_column("end_ns")
    if ends.null_count() and whole is None:
        # No minute for a line without an end time: hash the file built whole.
        file = build_event_file(events)
        return FileDigests(file.sha256, file.count, 0, [], [])
    rows = np.arange(frame.height, dtype=np.int64) if order is None else order.astype(np.int64)
    minutes = ends.to_numpy()[rows] // MINUTE_NS
    first = int(minutes[0])
    if int(minutes[-1]) - first > MAX_DIGEST_MINUTES:
        raise ValueError(f"events span more than {MAX_DIGEST_MINUTES:,} minutes")
    counts = np.bincount(minutes - first)
    del minutes
    bounds = np.concatenate(([0], np.cumsum(counts)))  # line where each minute starts
    chunks_hash = hashlib.sha256()
    digests: list[str] = []
    minute, minute_hash = 0, hashlib.sha256()  # the minute whose lines come next
    for start, stop in slice_bounds(bounds, chunk_lines):
        # The slice's own layout (its text and number columns only): memory follows the
        # slice, not the run. Columns constant within it are folded; the bytes are the same.
        piece = frame[rows[start:stop]]
        data, offsets = write_file(_layout(piece), np.arange(piece.height, dtype=np.int64))
        del piece
        view = data.data
        chunks_hash.update(view)
        if whole is not None:
            whole.update(view)
        line = start
        while line < stop:  # hand every minute the slice touches its lines
            minute_end = int(bounds[minute + 1])
            upto = min(minute_end, stop)
            minute_hash.update(view[int(offsets[line - start]) : int(offsets[upto - start])])
            line = upto
            if upto == minute_end:
                digests.append(minute_hash.hexdigest())
                minute, minute_hash = minute + 1, hashlib.sha256()
        del data, view, offsets
    if len(digests) != counts.size:
        raise AssertionError(f"hashed {len(digests)} of {counts.size} minutes")
    return FileDigests(
        chunks_hash.hexdigest(), frame.height, first * MINUTE_NS, counts.tolist(), digests
    )


_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


class FileDigestStream:
    """:func:`file_digests` of a file written one end-time range at a time.

    Each :meth:`add` takes the events of a later range of whole minutes (a minute is never
    split between two calls); the file is their concatenation, so the digests equal those
    of the whole file written at once. Minutes with no line get the SHA-256 of nothing.

    ``sink``, when given, is handed every block of the file's bytes as it is written (in
    order), so the file can be streamed or saved while it is hashed; a block is only valid
    until ``sink`` returns unless ``sink`` copies it.
    """

    def __init__(self, sink: Callable[[memoryview], object] | None = None) -> None:
        self._whole: _Updatable = hashlib.sha256()
        if sink is not None:
            self._whole = _Tee(self._whole, sink)
        self._count = 0
        self._first_minute_ns: int | None = None
        self._counts: list[int] = []
        self._digests: list[str] = []

    def add(self, events: pl.DataFrame) -> None:
        """Write and hash ``events`` (all ending after every event added before)."""
        if events.height == 0:
            return
        if events.get_column("end_ns").null_count():
            raise ValueError("every event of a streamed file needs an end_ns")
        part = file_digests(events, whole=self._whole)
        if self._first_minute_ns is None:
            self._first_minute_ns = part.first_minute_ns
        gap = (part.first_minute_ns - self._first_minute_ns) // MINUTE_NS - len(self._counts)
        if gap < 0:
            raise ValueError("events added out of end-time order")
        if gap + len(self._counts) > MAX_DIGEST_MINUTES:
            raise ValueError(f"events span more than {MAX_DIGEST_MINUTES:,} minutes")
        self._counts += [0] * gap + part.counts
        self._digests += [_EMPTY_SHA256] * gap + part.digests
        self._count += part.count

    def finish(self) -> FileDigests:
        """The whole file's digests."""
        return FileDigests(
            self._whole.hexdigest(),
            self._count,
            self._first_minute_ns or 0,
            self._counts,
            self._digests,
        )


class _Updatable(Protocol):
    def update(self, data: memoryview, /) -> None: ...

    def hexdigest(self) -> str: ...


class _Tee:
    """A SHA-256 that also hands every block it hashes to a sink."""

    def __init__(self, digest: _Updatable, sink: Callable[[memoryview], object]) -> None:
        self._digest = digest
        self._sink = sink

    def update(self, data: memoryview, /) -> None:
        self._digest.update(data)
        self._sink(data)

    def hexdigest(self) -> str:
        return self._digest.hexdigest()


def read_events(source: str | Path | bytes) -> pl.DataFrame:
    """Parse a canonical event file (path or bytes) into a frame with EVENT_SCHEMA types."""
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    if not data.strip():
        return pl.DataFrame(schema=EVENT_SCHEMA)
    read_schema = {k: (pl.String() if k in NS_COLUMNS else v) for k, v in EVENT_SCHEMA.items()}
    frame = pl.read_ndjson(io.BytesIO(data), schema=read_schema)
    return frame.with_columns(pl.col(c).cast(pl.Int64) for c in NS_COLUMNS).select(EVENT_COLUMNS)
