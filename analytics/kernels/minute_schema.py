"""The minute table's Polars types, from the column declaration
(:mod:`storage.schema.minute_columns`): counts ``bigint`` → Int64, samples and caps ``integer`` →
Int32, figures ``double precision`` → Float64 (rounded to :data:`SIGNIFICANT_DIGITS`)."""

from __future__ import annotations

from typing import Final

import polars as pl

from tpmledger.analytics.kernels.figure_rules import SIGNIFICANT_DIGITS
from tpmledger.storage.schema.minute_columns import MINUTE_FIGURES

__all__ = ["MINUTE_FIGURE_SCHEMA", "ROUNDED_FIGURES", "SIGNIFICANT_DIGITS", "ZERO_WHEN_EMPTY"]

_POLARS_TYPES: Final[dict[str, pl.DataType]] = {
    "bigint": pl.Int64(),
    "integer": pl.Int32(),
    "double precision": pl.Float64(),
}
#: Figure column → its Polars type, in the table's order.
MINUTE_FIGURE_SCHEMA: Final[dict[str, pl.DataType]] = {
    c.name: _POLARS_TYPES[c.postgres] for c in MINUTE_FIGURES
}
#: Figures rounded to 12 significant digits before they are stored or signed.
ROUNDED_FIGURES: Final = tuple(c.name for c in MINUTE_FIGURES if c.rounded)
#: Figures an empty minute shows as 0 (the others as null: not measured).
ZERO_WHEN_EMPTY: Final = tuple(c.name for c in MINUTE_FIGURES if c.zero_when_empty)
