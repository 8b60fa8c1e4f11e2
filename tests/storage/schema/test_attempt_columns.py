"""The attempt column declaration agrees with what is built from it and what reads it."""

from __future__ import annotations

import polars as pl
from sqlalchemy import inspect
from sqlalchemy.dialects import postgresql

from tpmledger.provenance.event_schema import EVENT_SCHEMA
from tpmledger.storage.readers.attempt_frames import ATTEMPT_FRAME_SCHEMA
from tpmledger.storage.schema.attempt_columns import ATTEMPT_COLUMNS, ATTEMPT_COPY_COLUMNS
from tpmledger.storage.server.database import get_engine


def test_the_migrated_table_has_every_declared_column_with_its_type(database_url: str) -> None:
    dialect = postgresql.dialect()
    stored = {c["name"]: c for c in inspect(get_engine(database_url)).get_columns("attempts")}
    for column in ATTEMPT_COLUMNS:
        found = stored[column.name]
        assert found["type"].compile(dialect=dialect).lower() == column.postgres, column.name
        assert found["nullable"] is column.nullable, column.name


def test_every_event_file_key_that_is_a_column_is_read_with_its_type() -> None:
    # The event file's format belongs to provenance (a leaf that imports nothing of ours),
    # so it is declared there; this keeps the two declarations in step.
    for name, dtype in EVENT_SCHEMA.items():
        assert name in ATTEMPT_FRAME_SCHEMA, name
        assert ATTEMPT_FRAME_SCHEMA[name] == dtype, name
    assert set(ATTEMPT_FRAME_SCHEMA) <= set(ATTEMPT_COPY_COLUMNS)
    assert ATTEMPT_FRAME_SCHEMA["concurrency_cap"] == pl.Int64()
