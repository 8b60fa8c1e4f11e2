"""The minute column declaration agrees with the migrated tables and what is built from it.

Every consumer of the minute columns is compared with the declaration here, so a column
added to it that one consumer does not carry fails; and no product module lists the
columns by hand (a copy would not follow an added column).
"""

from __future__ import annotations

import ast
from dataclasses import fields
from datetime import UTC, datetime

import polars as pl
import pytest
from sqlalchemy import inspect, text
from sqlalchemy.dialects import postgresql

from tests.package_tree import source_files
from tpmledger.analytics.kernels.minute_schema import (
    MINUTE_FIGURE_SCHEMA,
    ROUNDED_FIGURES,
    ZERO_WHEN_EMPTY,
)
from tpmledger.analytics.kernels.minute_table import EMPTY_COUNTS
from tpmledger.analytics.kernels.minute_table import MINUTE_COLUMNS as TABLE_COLUMNS
from tpmledger.analytics.live.live_row_schema import EXTRA_COLUMNS, finished_rows
from tpmledger.analytics.views.current_table import _empty_row
from tpmledger.analytics.views.run_views import API_MINUTE_KEYS
from tpmledger.storage.readers import run_metrics_read
from tpmledger.storage.schema.minute_columns import (
    EMPTY_FIGURES,
    MINUTE_COLUMNS,
    MINUTE_FIGURES,
    MINUTE_TABLE,
)
from tpmledger.storage.schema.models import LiveMinute, MinuteMetric
from tpmledger.storage.server.database import get_engine, in_one_snapshot
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
    row = _empty_row("*", datetime(2026, 2, 1, 3, 44, tzinfo=UTC))
    assert set(row) == set(MINUTE_COLUMNS)
    assert {name: row[name] for name in EMPTY_FIGURES} == EMPTY_FIGURES
    assert all(type(row[n]) is type(v) for n, v in EMPTY_FIGURES.items()), "0 vs 0.0"


FIGURE_NAMES = [c.name for c in MINUTE_FIGURES]


def test_the_minute_counts_are_the_declared_counts() -> None:
    # Filled with 0 where a seal's chunk has no cell: every count, no sample, no rate.
    assert list(EMPTY_COUNTS) == [
        c.name for c in MINUTE_FIGURES if c.zero_when_empty and not c.sample
    ]
    assert {"calls_in_minute", "tpm_total", "retries", "shards_active"} <= set(EMPTY_COUNTS)
    assert not {"in_flight_max", "queue_depth_max", "retry_rate"} & set(EMPTY_COUNTS)


def test_the_api_minute_series_serves_every_declared_figure_but_the_unserved() -> None:
    served = [name for name in API_MINUTE_KEYS if name in FIGURE_NAMES]
    assert served == [c.name for c in MINUTE_FIGURES if c.served]  # in the table's order
    assert ("minute_utc", "state", *served, "tokens") == API_MINUTE_KEYS
    # The five the API leaves to the sealed table and its export (docs/api.md).
    assert {c.name for c in MINUTE_FIGURES if not c.served} == {
        "ttft_mean_s", "ttft_variance_s2", "latency_p50_s", "latency_p95_s", "latency_p99_s",
    }  # fmt: skip


def test_a_live_row_carries_every_declared_column() -> None:
    table = finished_rows(pl.DataFrame({"shard_id": ["*"], "minute_ns": [0]}))
    expected = [c if c != "minute_utc" else "minute_ns" for c in MINUTE_COLUMNS]
    assert table.columns == [*expected, *EXTRA_COLUMNS]


def test_the_metrics_overlay_reads_declared_columns_in_their_order(database_url: str) -> None:
    """The SQL overlay behind /metrics' per-run series carries the declared columns the
    series read (not every one: their cost, bench/results/move_cost.txt), named and ordered
    as declared; the migrated database answers it."""
    keys = [run_metrics_read.RunKey("no-such-run", None)]
    query = f"WITH {run_metrics_read._chosen('true')} SELECT * FROM chosen LIMIT 0"

    def columns(session: object) -> list[str]:
        result = session.execute(text(query), run_metrics_read._params(keys))  # type: ignore[attr-defined]
        return list(result.keys())

    assert set(FIGURE_NAMES) >= run_metrics_read.READ_COLUMNS  # a renamed column fails here
    carried = [name for name in FIGURE_NAMES if name in run_metrics_read.READ_COLUMNS]
    found = in_one_snapshot(database_url, columns)
    assert found == ["run_id", "shard_id", "minute_utc", *carried, "from_live", "retry_evidence"]
    assert {f.name for f in fields(run_metrics_read.MinuteRow)} <= set(carried)


#: A literal naming this many of the minute columns is a hand copy of the declaration.
COPY_SIZE = 8


def test_no_product_module_lists_the_minute_columns_by_hand() -> None:
    names = set(MINUTE_COLUMNS)
    copies = []
    for module, path in source_files():
        if module == "tpmledger.storage.schema.minute_columns":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            items = (
                node.keys
                if isinstance(node, ast.Dict)
                else node.elts
                if isinstance(node, ast.Tuple | ast.List | ast.Set)
                else []
            )
            listed = {i.value for i in items if isinstance(i, ast.Constant)} & names
            if len(listed) >= COPY_SIZE:
                copies.append(f"{module}:{node.lineno} ({len(listed)} columns)")
    assert copies == []
