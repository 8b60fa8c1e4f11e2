"""JCS (RFC 8785) text of event values, column at a time, for the canonical event file.

Integers are printed by the line writer, plain strings are copied between quotes, JSON
escaping is applied only to a string column that has something to escape, and the two
float columns are printed as ECMAScript number text, as :mod:`tpmledger.provenance.number_text`
defines it. Polars prints the plain-decimal range fast, but only once it has printed the
golden vectors exactly as that definition does (checked once per process); floats outside
that range, and every float if Polars ever disagrees, are printed by the definition itself,
one distinct value at a time. Columns holding one value in every row are
printed once. :mod:`provenance.event_file` lays the lines out and
:mod:`provenance.line_writer` writes them.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import polars as pl
import rfc8785

from tpmledger.provenance.event_schema import EVENT_SCHEMA, NS_COLUMNS
from tpmledger.provenance.number_text import number_text

# Doubles whose text exercises every rule of the definition: integers, fractions,
# the edges of the plain-decimal range, shortest-digit cases and extremes.
GOLDEN_FLOATS = (
    0.5,
    1.0,
    1.5,
    12.0,
    100.0,
    0.1,
    0.2,
    0.3,
    1 / 3,
    2 / 3,
    4.35,
    0.000001,
    0.0000015,
    0.000123,
    1234.5678,
    9007199254740992.0,
    9007199254740994.0,
    123456789012345680000.0,
    1e20,
    99999999999999990000.0,
    0.1 + 0.2,
    5.0e-5,
    2.0**-20,
    1.7976931348623157e-7,
    6.02214076e23,
    1e21,
    1e-7,
    5e-324,
    1.7976931348623157e308,
    -2.5,
    -0.001,
)


def jcs_text(value: object) -> str:
    """The RFC 8785 text of one value, from the ``rfc8785`` package (the reference)."""
    return rfc8785.dumps(value).decode("utf-8")  # type: ignore[arg-type]


@functools.cache
def polars_prints_floats_canonically() -> bool:
    """Whether this Polars prints the golden vectors in range exactly as :func:`number_text`."""
    series = pl.Series("v", GOLDEN_FLOATS, dtype=pl.Float64)
    frame = pl.DataFrame({"v": series})
    fast = frame.select(_fast_text_exprs("v", "v", "t", "p"))
    for value, text, plain in zip(GOLDEN_FLOATS, fast["t"], fast["p"], strict=True):
        if plain and text != number_text(value):
            return False
    return True


def _fast_text_exprs(value: str, printed: str, text: str, plain: str) -> list[pl.Expr]:
    """Polars' text of a float column, and whether that text is in the plain range."""
    v = pl.col(value)
    shown = v.cast(pl.String) if printed == value else pl.col(printed)
    # Polars prints the shortest round-trip digits; in ECMAScript's plain-decimal
    # range (1e-6 <= |x| < 1e21) it does so without an exponent whenever it has no "e".
    return [
        pl.when(v.is_null())
        .then(pl.lit("null"))
        .when(v == 0)
        .then(pl.lit("0"))  # "-0.0" and "0.0" print as 0
        .otherwise(shown.str.strip_suffix(".0"))  # "12.0" prints as 12
        .alias(text),
        (
            v.is_null()
            | (v == 0)
            | ((v.abs() >= 1e-6) & (v.abs() < 1e21) & ~shown.str.contains("e", literal=True))
        ).alias(plain),
    ]


def _float_texts(frame: pl.DataFrame, names: list[str]) -> dict[str, pl.Series]:
    """ECMAScript number text of each float column (``null`` for nulls, NaN refused).

    All columns are printed in one select (Polars works on them in parallel), once:
    inside one expression the two uses of the printed text would each print again.
    """
    if not names:
        return {}
    if not polars_prints_floats_canonically():
        return {name: _defined_texts(frame.get_column(name)) for name in names}
    values = frame.select(pl.col(n).alias(f"v{i}") for i, n in enumerate(names))
    printed = frame.select(pl.col(n).cast(pl.String).alias(f"s{i}") for i, n in enumerate(names))
    both = pl.concat([values, printed], how="horizontal")
    exprs: list[pl.Expr] = []
    for i in range(len(names)):
        exprs += _fast_text_exprs(f"v{i}", f"s{i}", f"t{i}", f"p{i}")
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
        special = {v: number_text(float(v)) for v in odd}
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


def _defined_texts(series: pl.Series) -> pl.Series:
    """Every value's text from :func:`number_text` itself, one distinct value at a time."""
    texts = {v: number_text(float(v)) for v in series.drop_nulls().unique().to_list()}
    return (
        series.replace_strict(texts, default=None, return_dtype=pl.String)
        .fill_null("null")
        .alias(series.name)
    )


def _escaped_string(name: str) -> pl.Expr:
    """JCS string text (with quotes) of a column that has characters to escape.

    Polars' (serde) encoder escapes exactly as JCS does: ``"``, ``\\`` and U+0000–U+001F
    (``\\b \\f \\n \\r \\t`` short forms, the rest ``\\u00xx``), everything else
    verbatim UTF-8. A one-field struct encodes as ``{"name":<value>}``; the value is cut out.
    """
    encoded = pl.struct(pl.col(name)).struct.json_encode()
    return encoded.str.slice(len(name) + 4).str.strip_suffix("}")


@dataclass(frozen=True)
class ValueField:
    """How one key's value is printed: ``constant`` (printed once, in the template),
    ``text`` (the final bytes of a text column, between quotes when ``quoted``) or
    ``integer`` (decimal, between quotes when ``quoted``). A null prints ``null``."""

    name: str
    kind: Literal["constant", "text", "integer"]
    column: pl.Expr
    quoted: bool


def value_fields(
    frame: pl.DataFrame, constants: Mapping[str, str]
) -> tuple[pl.DataFrame, list[ValueField]]:
    """The frame with float columns replaced by their text, and how each key is printed.

    Plain strings are copied as they are between quotes; JSON escaping is applied only
    to a string column that has something to escape; integers are printed by the
    writer; columns in ``constants`` cost nothing per row.
    """
    strings = [n for n, t in EVENT_SCHEMA.items() if t == pl.String() and n not in constants]
    escape = (
        frame.select(pl.col(strings).str.contains_any(_ESCAPED_CHARS).any()).row(0, named=True)
        if strings
        else {}
    )
    floats = [n for n, t in EVENT_SCHEMA.items() if t == pl.Float64() and n not in constants]
    fields: list[ValueField] = []
    for name, dtype in EVENT_SCHEMA.items():
        column = pl.col(name)
        if name in constants:
            fields.append(ValueField(name, "constant", column, False))
        elif dtype == pl.Float64():
            fields.append(ValueField(name, "text", column, False))  # the column is its text
        elif dtype == pl.String() and escape.get(name):
            fields.append(ValueField(name, "text", _escaped_string(name), False))
        elif dtype == pl.String():
            fields.append(ValueField(name, "text", column, True))
        else:
            fields.append(ValueField(name, "integer", column, name in NS_COLUMNS))
    return frame.with_columns(**_float_texts(frame, floats)), fields


def constant_texts(frame: pl.DataFrame) -> dict[str, str]:
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
            constants[name] = jcs_text(value)
        else:  # the same digits Polars prints for the column
            constants[name] = f'"{value}"' if name in NS_COLUMNS else str(value)
    return constants
