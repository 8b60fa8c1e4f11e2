"""The hand-written COPY text encoder stores exactly what psycopg's own row writer stores."""

from __future__ import annotations

import os
from typing import Any

import orjson
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.storage.builders import BASE_NS, attempt_row
from tpmledger.storage.codecs.attempt_encoding import AttemptBlock, encode_attempts, merge_runs
from tpmledger.storage.schema.attempt_columns import ATTEMPT_COPY_COLUMNS
from tpmledger.storage.server.database import libpq_url
from tpmledger.storage.writers.bulk_writer import copy_blocks

_COLUMNS = ", ".join(ATTEMPT_COPY_COLUMNS)
# Everything PostgreSQL text accepts (no NUL), with COPY's special characters made likely.
_TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from("\\\t\n\r\"',{}[] \x0b\x1f\x7fé€😀"),
        st.characters(exclude_characters="\x00", exclude_categories=("Cs",)),
    ),
    max_size=12,
)
_INT = st.none() | st.integers(0, 2**31 - 1)
_FLOAT = st.none() | st.floats(0, 1e6, allow_nan=False, allow_infinity=False)


@st.composite
def rows(draw: st.DrawFn) -> tuple[Any, ...]:
    """An attempt row whose every text column may hold COPY-special characters."""
    attributes = draw(
        st.dictionaries(_TEXT, _TEXT | st.integers(-(2**63), 2**63 - 1) | st.none(), max_size=3)
    )
    return attempt_row(
        trace_id=os.urandom(16),
        span_id=os.urandom(8),
        parent_span_id=draw(st.none() | st.just(os.urandom(8))),
        run_id=draw(_TEXT),
        shard_id=draw(_TEXT),
        declared_shard_count=draw(_INT),
        concurrency_cap=draw(_INT),
        sweep_id=draw(st.none() | _TEXT),
        call_id=draw(_TEXT),
        call_id_explicit=draw(st.booleans()),
        resend_count=draw(_INT),
        start_ns=BASE_NS + draw(st.integers(0, 10**12)),
        queue_wait_s=draw(_FLOAT),
        ttft_s=draw(_FLOAT),
        prompt_tokens=draw(_INT),
        cache_read_tokens=draw(_INT),
        model=draw(st.none() | _TEXT),
        response_model=draw(st.none() | _TEXT),
        finish_reasons=draw(st.none() | st.lists(_TEXT, max_size=3)),
        error_type=draw(st.none() | _TEXT),
        http_status=draw(_INT),
        span_name=draw(_TEXT),
        span_attributes=orjson.dumps(attributes).decode(),
    )


def _stored(conn: psycopg.Connection, table: str) -> list[tuple[Any, ...]]:
    return conn.execute(f"SELECT {_COLUMNS} FROM {table} ORDER BY span_id").fetchall()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@pytest.mark.slow
@given(batch=st.lists(rows(), min_size=1, max_size=6))
def test_encoded_rows_store_what_psycopg_stores(database_url: str, batch: list[Any]) -> None:
    with psycopg.connect(libpq_url(database_url)) as conn:
        conn.execute("CREATE TEMP TABLE IF NOT EXISTS oracle (LIKE attempts INCLUDING DEFAULTS)")
        conn.execute("TRUNCATE attempts, oracle")
        with conn.cursor() as cur, cur.copy(f"COPY oracle ({_COLUMNS}) FROM STDIN") as copy:
            for row in batch:
                copy.write_row(row)
        copy_blocks(conn, "attempts", [encode_attempts(batch)])
        assert _stored(conn, "attempts") == _stored(conn, "oracle")
        conn.rollback()


def test_blocks_tally_their_runs() -> None:
    first = encode_attempts(
        [
            attempt_row(run_id="r", shard_id="b", end_ns=BASE_NS + 3, concurrency_cap=None),
            attempt_row(run_id="r", shard_id="a", end_ns=BASE_NS + 1, sweep_id="sw"),
            attempt_row(run_id="q", shard_id="a", end_ns=BASE_NS, declared_shard_count=None),
        ]
    )
    second = encode_attempts([attempt_row(run_id="r", shard_id="c", end_ns=BASE_NS - 5)])
    assert first.rows == 3 and first.text.count(b"\n") == 3
    merged = merge_runs([first, second])
    r = merged["r"]
    assert (r.first_ns, r.last_ns, r.attempts) == (BASE_NS - 5, BASE_NS + 3, 3)
    assert (r.shard_ids, r.sweep_id, r.concurrency_cap) == ({"a", "b", "c"}, "sw", 16)
    assert merged["q"].declared_shard_count is None and merged["q"].attempts == 1
    assert first.runs["r"].shard_ids == {"a", "b"}  # merging leaves the blocks as they were


def test_an_empty_batch_is_an_empty_block() -> None:
    assert encode_attempts([]) == AttemptBlock(b"", 0, {})


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_durations_are_refused_not_stored_as_null(value: float) -> None:
    with pytest.raises(ValueError, match="non-finite"):
        encode_attempts([attempt_row(ttft_s=value)])
    with pytest.raises(ValueError, match="non-finite"):
        encode_attempts([attempt_row(queue_wait_s=value)])
