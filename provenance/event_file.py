"""The canonical event file (SPEC §5): one RFC 8785 (JCS) JSON object per line.

Lines are ordered by (end_ns, trace_id, span_id) and end with ``\\n``; every line has
exactly the keys of :data:`EVENT_SCHEMA` (already in JCS order), nanosecond times are
decimal strings and absent values are ``null``. ``events_sha256`` is the SHA-256 of the
file's bytes, so ``sha256sum events.jsonl`` reproduces it.

The writer is vectorised: the key set is fixed and sorted, so each line is one Polars
``concat_str`` of literal key text and per-column value text (integers printed by Polars,
plain strings quoted by the surrounding literals, JSON escaping only for a string column
that has something to escape). The two floats (``queue_wait_s``, ``ttft_s``) are printed
as ECMAScript number text; only floats Polars does not print the ECMAScript way (outside
the plain-decimal range) go through the ``rfc8785`` package, one distinct value at a
time. Tests prove the bytes identical to ``rfc8785.dumps`` of each record.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import rfc8785

EVENTS_FORMAT = "tpmledger.events.v1"

# Keys of one event line, in JCS (sorted) order, with their column types.
EVENT_SCHEMA: dict[str, pl.DataType] = {
    "call_id": pl.String(),
    "completion_tokens": pl.Int64(),
    "end_ns": pl.Int64(),
    "error_type": pl.String(),
    "http_status": pl.Int64(),
    "model": pl.String(),
    "prompt_tokens": pl.Int64(),
    "queue_wait_s": pl.Float64(),
    "resend_count": pl.Int64(),
    "run_id": pl.String(),
    "shard_id": pl.String(),
    "span_id": pl.String(),
    "start_ns": pl.Int64(),
    "status": pl.String(),
    "trace_id": pl.String(),
    "ttft_s": pl.Float64(),
}
EVENT_COLUMNS: tuple[str, ...] = tuple(EVENT_SCHEMA)
# Integer columns published as decimal strings (nanoseconds exceed 2^53).
NS_COLUMNS = frozenset({"start_ns", "end_ns"})
ORDER_COLUMNS = ("end_ns", "trace_id", "span_id")


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
    ties = typed.select(ORDER_COLUMNS)[rows].with_row_index("_at")
    settled = ties.sort(ORDER_COLUMNS).get_column("_at").to_numpy()
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
        return typed.sort(ORDER_COLUMNS), None  # nulls first, as Polars sorts them
    return typed, _order_by_end(typed)


def canonical_order(events: pl.DataFrame) -> pl.DataFrame:
    """Events with exactly the canonical columns and types, in canonical line order.

    Already ordered input is recognised in one pass and returned as is.
    """
    typed, order = _line_order(_typed(events))
    return typed if order is None else typed[order]


def _jcs_text(value: object) -> str:
    return rfc8785.dumps(value).decode("utf-8")  # type: ignore[arg-type]


def _float_texts(frame: pl.DataFrame, names: list[str]) -> dict[str, pl.Series]:
    """ECMAScript number text of each float column (``null`` for nulls, NaN refused).

    All columns are printed in one select (Polars works on them in parallel), once:
    inside one expression the two uses of the printed text would each print again.
    """
    if not names:
        return {}
    values = frame.select(pl.col(n).alias(f"v{i}") for i, n in enumerate(names))
    printed = frame.select(pl.col(n).cast(pl.String).alias(f"s{i}") for i, n in enumerate(names))
    both = pl.concat([values, printed], how="horizontal")
    exprs: list[pl.Expr] = []
    for i in range(len(names)):
        v, text = pl.col(f"v{i}"), pl.col(f"s{i}")
        # Polars prints the shortest round-trip digits; in ECMAScript's plain-decimal
        # range (1e-6 <= |x| < 1e21) it does so without an exponent whenever it has no "e".
        exprs += [
            pl.when(v.is_null())
            .then(pl.lit("null"))
            .when(v == 0)
            .then(pl.lit("0"))  # "-0.0" and "0.0" print as 0
            .otherwise(text.str.strip_suffix(".0"))  # "12.0" prints as 12
            .alias(f"t{i}"),
            (
                v.is_null()
                | (v == 0)
                | ((v.abs() >= 1e-6) & (v.abs() < 1e21) & ~text.str.contains("e", literal=True))
            ).alias(f"p{i}"),
        ]
    checked = both.select(exprs)
    return {
        name: _with_special_floats(
            frame.get_column(name), checked.get_column(f"t{i}"), checked.get_column(f"p{i}")
        )
        for i, name in enumerate(names)
    }


def _with_special_floats(series: pl.Series, text: pl.Series, plain: pl.Series) -> pl.Series:
    """Text with values outside the plain-decimal range printed by ``rfc8785``."""
    if not plain.all():
        odd = series.filter(~plain).unique().to_list()
        special = {v: _jcs_text(float(v)) for v in odd}
        text = (
            pl.DataFrame({"v": series, "t": text, "p": plain})
            .select(
                pl.when(pl.col("p"))
                .then(pl.col("t"))
                .otherwise(
                    pl.col("v").replace_strict(special, default=None, return_dtype=pl.String)
                )
            )
            .to_series()
        )
    return text


# A string needs JSON escaping iff it holds '"', '\' or U+0000-U+001F (RFC 8785 §3.2.2.2);
# checked with ``str.contains_any`` (Aho-Corasick: about half the cost of a regex).
_ESCAPED_CHARS = [chr(c) for c in range(0x20)] + ['"', "\\"]


def _escaped_string(name: str) -> pl.Expr:
    """JCS string text (with quotes) of a column that has characters to escape.

    Polars' (serde) encoder escapes exactly as JCS does: ``"``, ``\\`` and U+0000–U+001F
    (``\\b \\f \\n \\r \\t`` short forms, the rest ``\\u00xx``), everything else
    verbatim UTF-8. A one-field struct encodes as ``{"name":<value>}``; the value is cut out.
    """
    encoded = pl.struct(pl.col(name)).struct.json_encode()
    return encoded.str.slice(len(name) + 4).str.strip_suffix("}")


def _value_texts(
    frame: pl.DataFrame, skip: frozenset[str] = frozenset()
) -> tuple[pl.DataFrame, list[tuple[str, pl.Expr, bool]]]:
    """The frame with float columns replaced by their text, and per key: (name, text
    expression, whether the text still needs surrounding quotes).

    Plain strings and nanosecond decimals are quoted by the literal text around them
    (no per-row work) unless the column has nulls; escaping is done only for a string
    column that has something to escape. Columns in ``skip`` get a placeholder entry
    (their text is printed elsewhere) and cost nothing.
    """
    strings = [n for n, t in EVENT_SCHEMA.items() if t == pl.String() and n not in skip]
    escape = (
        frame.select(pl.col(strings).str.contains_any(_ESCAPED_CHARS).any()).row(0, named=True)
        if strings
        else {}
    )
    nulls = frame.null_count().row(0, named=True)
    floats = [n for n, t in EVENT_SCHEMA.items() if t == pl.Float64() and n not in skip]
    float_texts = _float_texts(frame, floats)
    texts: list[tuple[str, pl.Expr, bool]] = []
    for name, dtype in EVENT_SCHEMA.items():
        column = pl.col(name)
        if name in skip:
            texts.append((name, column, False))
            continue
        if dtype == pl.Float64():
            texts.append((name, column, False))  # the column now holds its text
            continue
        if dtype == pl.String() and escape.get(name):
            texts.append((name, _escaped_string(name).fill_null("null"), False))
            continue
        text = column if dtype == pl.String() else column.cast(pl.String)
        quoted = dtype == pl.String() or name in NS_COLUMNS
        if nulls[name] and quoted:
            text = (
                pl.when(column.is_null())
                .then(pl.lit("null"))
                .otherwise(pl.concat_str(pl.lit('"'), text, pl.lit('"')))
            )
            quoted = False
        elif nulls[name]:
            text = text.fill_null("null")
        texts.append((name, text, quoted))
    return frame.with_columns(**float_texts), texts


def _constant_texts(frame: pl.DataFrame) -> dict[str, str]:
    """JCS text of every string or integer column that holds one value in every row.

    Such a column (``run_id`` always, often ``model``) is printed once into the line
    template instead of once per row. Float columns are never folded (NaN must still
    be refused, and their text has its own path).
    """
    candidates = [n for n, t in EVENT_SCHEMA.items() if t != pl.Float64()]
    row = frame.select(
        [(pl.col(n) == pl.col(n).first()).all().alias(f"{n}_same") for n in candidates]
        + [pl.col(n).first().alias(f"{n}_first") for n in candidates]
        + [pl.col(n).null_count().alias(f"{n}_nulls") for n in candidates]
    ).row(0, named=True)
    constants: dict[str, str] = {}
    for name in candidates:
        value = row[f"{name}_first"]
        if row[f"{name}_nulls"] or value is None or not row[f"{name}_same"]:
            continue
        if isinstance(value, str):
            constants[name] = _jcs_text(value)
        else:  # the same digits Polars prints for the column
            constants[name] = f'"{value}"' if name in NS_COLUMNS else str(value)
    return constants


def _template_text(text: str) -> str:
    """Literal text inside a ``pl.format`` template (braces doubled)."""
    return text.replace("{", "{{").replace("}", "}}")


def canonical_lines(events: pl.DataFrame) -> pl.Series:
    """One JCS line (with its trailing newline) per event, in canonical order.

    ``events`` may come in any row order. The keys are fixed and sorted, so a line is
    one ``pl.format`` template of literal key text (and of columns that are constant
    over the run) with per-column value text in its placeholders, built in Rust
    without per-row Python or JSON encoding.
    (``pl.format`` measured about half the cost of ``concat_str`` with literal parts.)
    """
    frame, order = _line_order(_typed(events))
    if frame.height == 0:
        return pl.Series("line", [], dtype=pl.String)
    constants = _constant_texts(frame)
    frame, texts = _value_texts(frame, skip=frozenset(constants))
    template, values = "", []
    glue = "{"
    for name, text, quoted in texts:
        quote = '"' if quoted else ""
        template += _template_text(f'{glue}"{name}":')
        if name in constants:
            template += _template_text(constants[name])
            quote = ""
        else:
            template += _template_text(quote) + "{}"
            values.append(text)
        glue = f"{quote},"
    template += _template_text(glue[:-1] + "}\n")
    # Every value is a column of the frame (no literal Series), so Polars formats its
    # chunks in parallel.
    lines = frame.select(pl.format(template, *values).alias("line")).to_series()
    # Lines are built in the input's row order and then put in canonical order: one
    # gather of a string column (views) instead of a gather of all sixteen columns.
    return (lines if order is None else lines.gather(order)).rechunk()


def build_event_file(events: pl.DataFrame) -> EventFile:
    """The canonical file of ``events`` (any order, canonical columns) with its digest."""
    lines = canonical_lines(events)
    array = lines.to_arrow()
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    array = array.cast(pa.large_string())
    if len(array) == 0:
        empty = memoryview(b"")
        return EventFile(empty, 0, pl.Series([0], dtype=pl.Int64))
    lengths = lines.str.len_bytes().cast(pl.Int64)
    offsets = pl.concat([pl.Series([0], dtype=pl.Int64), lengths.cum_sum()])
    # First value offset of the (possibly sliced) Arrow array: int64 little-endian.
    offsets_buffer = memoryview(array.buffers()[1])
    base = int.from_bytes(offsets_buffer[array.offset * 8 : array.offset * 8 + 8], "little")
    data = memoryview(array.buffers()[2])[base : base + int(offsets[-1])]
    return EventFile(data=data, count=len(array), offsets=offsets)


def read_events(source: str | Path | bytes) -> pl.DataFrame:
    """Parse a canonical event file (path or bytes) into a frame with EVENT_SCHEMA types."""
    data = source if isinstance(source, bytes) else Path(source).read_bytes()
    if not data.strip():
        return pl.DataFrame(schema=EVENT_SCHEMA)
    read_schema = {k: (pl.String() if k in NS_COLUMNS else v) for k, v in EVENT_SCHEMA.items()}
    frame = pl.read_ndjson(io.BytesIO(data), schema=read_schema)
    return frame.with_columns(pl.col(c).cast(pl.Int64) for c in NS_COLUMNS).select(EVENT_COLUMNS)
