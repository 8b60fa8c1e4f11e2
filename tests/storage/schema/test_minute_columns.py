"""The minute column declaration agrees with the migrated tables and what is built from it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import inspect
from sqlalchemy.dialects import postgresql

from tpmledger.analytics.kernels.minute_schema import (
    MINUTE_FIGURE_SCHEMA,
    ROUNDED_FIGURES,
    ZERO_WHEN_EMPTY,
)
from tpmledger.analytics.kernels.minute_table import MINUTE_COLUMNS as TABLE_COLUMNS
from tpmledger.analytics.views.current_table import _empty_row
from tpmledger.storage.schema.minute_columns import (
    EMPTY_FIGURES,
    MINUTE_COLUMNS,
    MINUTE_FIGURES,
    MINUTE_TABLE,
)
from tpmledger.storage.schema.models import LiveMinute, MinuteMetric
from tpmledger.storage.server.database import get_engine
from tpmledger.storage.writers.minute_versions import MINUTE_ROW_COLUMNS


@pytest.mark.parametrize("table", ["minute_metrics", "live_minutes"])
def test_the_migrated_table_has_every_declared_column_with_its_type(
    database_url: str, table: str
) -> None:
    dialect = postgresql.dialect()
    stored = {c["name"]: c for c in inspect(get_engine(database_url)).get_columns(table)}
    for column in MINUTE_TABLE:
        found = stored[column.name]
        assert found["type"].compile(dialect=dialect).lower() == column.postgres, column.name
        assert found["nullable"] is column.nullable, column.name


def test_the_models_take_their_figure_columns_from_the_declaration() -> None:
    dialect = postgresql.dialect()
    for model in (MinuteMetric, LiveMinute):
        columns = model.__table__.columns
        for column in MINUTE_TABLE:
            declared = columns[column.name]
            assert declared.type.compile(dialect=dialect).lower() == column.postgres
            assert declared.nullable is column.nullable, (model, column.name)
    assert set(MINUTE_ROW_COLUMNS) == set(MINUTE_COLUMNS)


def test_the_analytics_build_the_declared_table() -> None:
    assert TABLE_COLUMNS == MINUTE_COLUMNS
    assert list(MINUTE_FIGURE_SCHEMA) == [c.name for c in MINUTE_FIGURES]
    assert set(ROUNDED_FIGURES) == {
        n for n, t in MINUTE_FIGURE_SCHEMA.items() if str(t) == "Float64"
    }
    # Counts and in-flight samples are 0 in an empty minute; percentiles, rates, the
    # cap: not measured.
    assert {"calls_in_minute", "tpm_total", "retries", "in_flight_max"} <= set(ZERO_WHEN_EMPTY)
    assert not {"ttft_p95_s", "success_rate", "concurrency_cap"} & set(ZERO_WHEN_EMPTY)


def test_an_empty_minute_shows_zero_counts_and_unmeasured_figures() -> None:
    empty = EMPTY_FIGURES
    assert empty["calls_in_minute"] == 0 and empty["in_flight_mean"] == 0.0
    assert empty["ttft_p95_s"] is None and empty["concurrency_cap"] is None
    assert all(empty[c.name] == 0 for c in MINUTE_FIGURES if not c.nullable)


def test_the_live_view_fills_empty_minutes_as_declared() -> None:
    # analytics/views/current_table.py still lists these itself; this keeps it in step.
    row = _empty_row("*", datetime(2026, 2, 1, 3, 44, tzinfo=UTC))
    assert set(row) == set(MINUTE_COLUMNS)
    assert {name: row[name] for name in EMPTY_FIGURES} == EMPTY_FIGURES
    assert all(type(row[n]) is type(v) for n, v in EMPTY_FIGURES.items()), "0 vs 0.0"
