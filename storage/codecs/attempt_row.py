"""An attempt row built by column name, handed to storage in COPY order.

Ingest names every value it stores::

    attempt_row(
        identity=identity_part(trace_id=..., span_id=..., ...),
        measures=measures_part(start_ns=..., ...),
        description=description_part(model=..., ...),
        quota=quota_part(quota_tpm_declared=..., ...),
    )

Each ``*_part`` function takes the columns of its part of
:data:`storage.schema.attempt_columns.ATTEMPT_ROW_PARTS` as keyword arguments, all required;
:func:`attempt_row` joins the parts into a plain tuple in :data:`ATTEMPT_COPY_COLUMNS`
order, the order the COPY encoder (:mod:`storage.codecs.attempt_encoding`) unpacks. A missing or
misspelt column is a ``TypeError`` at the first row, never a value in the wrong column.

The functions are generated from the declaration when this module is imported (as
:mod:`dataclasses` generates ``__init__``), so declaring a column there adds its
parameter here. The row is built in parts of at most 15 columns because CPython compiles
a call with more keyword arguments into one that builds a dict first: one call with all
41 cost a quarter of normalization, the parts cost a few percent (bench/normalize.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from tpmledger.storage.schema.attempt_columns import ATTEMPT_ROW_PARTS

AttemptRow = tuple[Any, ...]
#: Above this many keyword arguments a call site builds a dict (CPython's
#: STACK_USE_GUARDRAIL of 30 stack slots, two per keyword argument).
MAX_PART_COLUMNS: Final = 15


def _generate(name: str, parameters: tuple[str, ...], body: str, doc: str) -> Callable[..., Any]:
    for parameter in parameters:
        if not parameter.isidentifier():
            raise ValueError(f"attempt column {parameter!r} is not a Python identifier")
    signature = f"*, {', '.join(parameters)}" if parameters else "values"
    namespace: dict[str, Any] = {}
    exec(f"def {name}({signature}):\n    return {body}\n", namespace)
    function: Callable[..., Any] = namespace[name]
    function.__doc__ = doc
    function.__module__ = __name__
    return function


def _part(part: str) -> Callable[..., AttemptRow]:
    columns = tuple(column.name for column in ATTEMPT_ROW_PARTS[part])
    if len(columns) > MAX_PART_COLUMNS:
        raise ValueError(f"attempt row part {part!r} has more than {MAX_PART_COLUMNS} columns")
    return _generate(
        f"{part}_part", columns, f"({', '.join(columns)},)", f"The {part} columns, by name."
    )


def _part_from(part: str) -> Callable[[Mapping[str, Any]], AttemptRow]:
    columns = tuple(column.name for column in ATTEMPT_ROW_PARTS[part])
    body = f"({', '.join(f'values[{name!r}]' for name in columns)},)"
    return _generate(
        f"{part}_part_from", (), body, f"The {part} columns from a mapping holding each by name."
    )


identity_part: Final = _part("identity")
measures_part: Final = _part("measures")
description_part: Final = _part("description")
quota_part: Final = _part("quota")
#: ``quota_part_from(values)``: the quota part from a dict (``KeyError`` names a missing
#: column); cheaper than ``quota_part(**values)`` for a reader that fills a dict by name.
quota_part_from: Final = _part_from("quota")
#: ``attempt_row(identity=..., measures=..., description=..., quota=...)`` → the COPY row.
attempt_row: Final[Callable[..., AttemptRow]] = _generate(
    "attempt_row",
    tuple(ATTEMPT_ROW_PARTS),
    " + ".join(ATTEMPT_ROW_PARTS),
    "One attempt row from its parts, as a tuple in COPY order.",
)
