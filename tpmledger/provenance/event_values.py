"""JCS (RFC 8785) text of event values, column at a time, for the canonical event file.

Integers are printed by the line writer, plain strings are copied between quotes, JSON
escaping is applied only to a string column that has something to escape, and the two
float columns are printed as ECMAScript number text; only floats that Polars does not
print the ECMAScript way (outside the plain-decimal range) go through the ``rfc8785``
package, one distinct value at a time. Columns holding one value in every row are
printed once. :mod:`provenance.event_file` lays the lines out and
:mod:`provenance.line_writer` writes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import polars as pl
import rfc8785

from tpmledger.provenance.event_schema import EVENT_SCHEMA, NS_COLUMNS


def jcs_text(value: object) -> str:
    """The RFC 8785 text of one value, from the ``rfc8785`` package (the reference)."""
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
        special = {v: jcs_text(float(v)) for v in odd}
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
