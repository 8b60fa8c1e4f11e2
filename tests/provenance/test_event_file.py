"""The fast canonical event-file writer is byte-identical to ``rfc8785.dumps`` per line."""

from __future__ import annotations

import hashlib
import math
from typing import Any

import numpy as np
import polars as pl
import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from tpmledger.provenance import event_file
from tpmledger.provenance.event_file import (
    EVENT_COLUMNS,
    EVENT_SCHEMA,
    ORDER_COLUMNS,
    build_event_file,
    canonical_order,
    file_digests,
    in_canonical_order,
    read_events,
    slice_bounds,
)


def reference_bytes(records: list[dict[str, Any]]) -> bytes:
    """The file as the rfc8785 package writes it, one record at a time."""
    ordered = sorted(records, key=lambda r: (r["end_ns"], r["trace_id"], r["span_id"]))
    out = []
    for r in ordered:
        doc = dict(r)
        for key in ("start_ns", "end_ns"):
            doc[key] = None if r[key] is None else str(r[key])
        out.append(rfc8785.dumps(doc) + b"\n")
    return b"".join(out)


def record(i: int, **overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "call_id": f"call-{i}",
        "completion_tokens": 50 + i,
        "end_ns": 1_769_917_442_000_000_000 + i * 1_000_003,
        "error_type": None,
        "http_status": 200,
        "model": "gpt-test",
        "prompt_tokens": 100 + i,
        "queue_wait_s": None,
        "resend_count": None,
        "run_id": "run-a",
        "shard_id": str(i % 8),
        "span_id": f"{i:016x}",
        "start_ns": 1_769_917_440_000_000_000 + i,
        "status": "ok",
        "trace_id": f"{i * 7919:032x}",
        "ttft_s": 0.1 + i / 1000,
    }
    base.update(overrides)
    return base


def frame(records: list[dict[str, Any]]) -> pl.DataFrame:
    return pl.DataFrame(records, schema=EVENT_SCHEMA)


def test_generated_records_match_rfc8785_and_sha256() -> None:
    records = [record(i) for i in range(500)]
    records[3]["error_type"] = "rate_limit"
    records[3]["status"] = "error"
    records[3]["http_status"] = 429
    records[4]["ttft_s"] = 2.0
    records[5]["queue_wait_s"] = 1e-7
    records[6]["queue_wait_s"] = 123456789012345678901234.0
    file = build_event_file(frame(records))
    expected = reference_bytes(records)
    assert file.tobytes() == expected
    assert file.sha256 == hashlib.sha256(expected).hexdigest()
    assert file.count == 500


def test_columns_constant_over_the_run_are_printed_once_exactly() -> None:
    # Constant columns go into the line template: braces, quotes, escapes and
    # nanosecond strings there must still print as rfc8785 prints them.
    shared = {
        "run_id": 'run "{a}" \\ {} \n',
        "model": "}{",
        "shard_id": "{}",
        "status": "ok",
        "start_ns": 1_769_917_440_000_000_000,
        "http_status": 200,
        "error_type": None,
    }
    records = [record(i, **shared) for i in range(50)]
    assert build_event_file(frame(records)).tobytes() == reference_bytes(records)


def test_lines_have_exactly_the_canonical_keys_in_order() -> None:
    line = build_event_file(frame([record(1)])).tobytes().decode()
    assert line.endswith("\n") and line.count("\n") == 1
    assert line.startswith('{"call_id":"call-1","completion_tokens":51,"end_ns":"')
    assert '"resend_count":null' in line and '"error_type":null' in line
    assert list(EVENT_COLUMNS) == sorted(EVENT_COLUMNS)


def test_empty_file() -> None:
    file = build_event_file(frame([]))
    assert file.tobytes() == b""
    assert file.sha256 == hashlib.sha256(b"").hexdigest()
    assert read_events(b"").height == 0


def test_per_minute_slices_hash_their_lines() -> None:
    records = [record(i) for i in range(10)]
    file = build_event_file(frame(records))
    lines = reference_bytes(records).splitlines(keepends=True)
    assert file.slice_sha256(2, 5) == hashlib.sha256(b"".join(lines[2:5])).hexdigest()
    assert file.slice_sha256(4, 4) == hashlib.sha256(b"").hexdigest()


finite_floats = st.floats(allow_nan=False, allow_infinity=False)
text = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=12)
# Integers are printed by the compiled writer: negatives and both ends of the range
# JSON numbers hold exactly (RFC 8785 refuses integers beyond 2^53 - 1).
SAFE = 2**53 - 1
maybe_int = (
    st.none()
    | st.integers(min_value=0, max_value=10**9)
    | st.integers(min_value=-SAFE, max_value=SAFE)
    | st.sampled_from([-SAFE, SAFE, -1, 0, 9, 10, -10])
)


@st.composite
def event_records(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "call_id": draw(text),
        "completion_tokens": draw(maybe_int),
        "end_ns": draw(st.integers(min_value=-(2**63), max_value=2**63 - 1)),
        "error_type": draw(st.none() | text),
        "http_status": draw(st.none() | st.integers(min_value=100, max_value=599)),
        "model": draw(st.none() | text),
        "prompt_tokens": draw(maybe_int),
        "queue_wait_s": draw(st.none() | finite_floats),
        "resend_count": draw(st.none() | st.integers(min_value=0, max_value=100)),
        "run_id": draw(text),
        "shard_id": draw(text),
        "span_id": draw(st.binary(min_size=8, max_size=8)).hex(),
        "start_ns": draw(st.integers(min_value=-(2**63), max_value=2**63 - 1)),
        "status": draw(st.sampled_from(["ok", "error"])),
        "trace_id": draw(st.binary(min_size=16, max_size=16)).hex(),
        "ttft_s": draw(
            st.none()
            | finite_floats
            | st.sampled_from([0.0, -0.0, 5e-324, 1e-7, 1e-6, 1e21, 1e20, -1.5e-9, 2.5e15])
        ),
    }


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.lists(event_records(), max_size=20))
def test_hypothesis_records_match_rfc8785(records: list[dict[str, Any]]) -> None:
    file = build_event_file(frame(records))
    assert file.tobytes() == reference_bytes(records)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.lists(event_records(), max_size=10))
def test_read_events_round_trips_bytes(records: list[dict[str, Any]]) -> None:
    first = build_event_file(frame(records))
    parsed = read_events(first.tobytes())
    assert build_event_file(parsed).tobytes() == first.tobytes()
    expected = canonical_order(frame(records)).with_columns(
        # -0.0 is written as 0, so it reads back as +0.0
        pl.col("queue_wait_s", "ttft_s").map_elements(
            lambda v: 0.0 if v == 0 else v, return_dtype=pl.Float64
        )
    )
    got = parsed.with_columns(
        pl.col("queue_wait_s", "ttft_s").map_elements(
            lambda v: 0.0 if v == 0 else v, return_dtype=pl.Float64
        )
    )
    assert_frame_equal(got, expected)
    assert all(not math.isnan(v) for v in got["ttft_s"].drop_nulls())


tied_keys = st.tuples(
    st.sampled_from([5, 7, 9]),
    st.sampled_from(["0" * 32, "0" * 31 + "1", "f" * 32]),
    st.sampled_from(["0" * 16, "0" * 15 + "a", "e" * 16]),
)


@pytest.mark.slow
@settings(max_examples=100, deadline=None)
@given(st.lists(tied_keys, max_size=27, unique=True), st.booleans())
def test_order_check_agrees_with_sorting_on_ties(
    keys: list[tuple[int, str, str]], presort: bool
) -> None:
    # Many equal end_ns/trace_id values: the neighbour check must settle ties exactly.
    records = [record(i, end_ns=e, trace_id=t, span_id=s) for i, (e, t, s) in enumerate(keys)]
    events = frame(records)
    if presort:
        events = events.sort(ORDER_COLUMNS)
    keys_only = events.select(ORDER_COLUMNS)
    assert in_canonical_order(events) == keys_only.equals(keys_only.sort(ORDER_COLUMNS))
    ordered = canonical_order(events)
    assert ordered.select(ORDER_COLUMNS).equals(keys_only.sort(ORDER_COLUMNS))
    assert ordered.sort(ORDER_COLUMNS).equals(events.sort(ORDER_COLUMNS))
    assert build_event_file(events).tobytes() == reference_bytes(records)


def test_nan_and_infinity_are_refused_as_rfc8785_says() -> None:
    import pytest

    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="no canonical JSON text"):
            build_event_file(frame([record(0, ttft_s=bad)]))


def test_integers_beyond_the_json_safe_range_are_refused_like_rfc8785() -> None:
    import pytest

    for bad in (2**53, -(2**53), 2**63 - 1):
        with pytest.raises(rfc8785.IntegerDomainError):
            rfc8785.dumps({"prompt_tokens": bad})
        with pytest.raises(rfc8785.IntegerDomainError):
            build_event_file(frame([record(0, prompt_tokens=bad)]))
    # Nanosecond times are decimal strings: every int64 is fine there.
    extreme = record(0, start_ns=-(2**63), end_ns=2**63 - 1)
    assert build_event_file(frame([extreme])).tobytes() == reference_bytes([extreme])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        event_records().map(lambda r: {**r, "end_ns": abs(r["end_ns"]) % (10 * 60 * 10**9)}),
        min_size=1,
        max_size=40,
    ),
    st.integers(min_value=1, max_value=8),
)
@pytest.mark.slow
def test_digests_written_a_few_minutes_at_a_time_match_the_whole_file(
    records: list[dict[str, Any]], chunk_lines: int
) -> None:
    events = frame(records)
    file = build_event_file(events)
    digests = file_digests(events, chunk_lines)
    assert (digests.sha256, digests.count) == (file.sha256, file.count)
    line, expected = 0, []
    for count in digests.counts:
        expected.append(file.slice_sha256(line, line + count))
        line += count
    assert line == file.count and digests.digests == expected
    minutes = sorted({r["end_ns"] // (60 * 10**9) for r in records})
    assert digests.first_minute_ns == minutes[0] * 60 * 10**9
    assert len(digests.counts) == minutes[-1] - minutes[0] + 1


def test_a_minute_longer_than_a_slice_is_written_a_slice_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 2,500 lines in one minute, a few in a later one, an empty minute between: the writer
    # never lays out more than a slice's lines, and every digest equals the whole file's.
    busy = [record(i, end_ns=1_769_917_440_000_000_000 + i * 20_000_000) for i in range(2_500)]
    late = [record(3_000 + i, end_ns=1_769_917_560_000_000_000 + i) for i in range(3)]
    events = frame(busy + late)
    file = build_event_file(events)
    written: list[int] = []
    real_write = event_file.write_file

    def counting_write(layout: Any, order: Any) -> Any:
        written.append(int(order.size))
        return real_write(layout, order)

    monkeypatch.setattr(event_file, "write_file", counting_write)
    digests = file_digests(events, chunk_lines=1_000)
    # The busy minute's last 500 lines and the next (whole) minutes share a slice.
    assert written == [1_000, 1_000, 503]
    assert (digests.sha256, digests.count, digests.counts) == (file.sha256, 2_503, [2_500, 0, 3])
    assert digests.digests == [
        file.slice_sha256(0, 2_500),
        hashlib.sha256(b"").hexdigest(),
        file.slice_sha256(2_500, 2_503),
    ]


def test_slices_take_whole_minutes_that_fit_and_cut_only_longer_ones() -> None:
    # Minutes of 3, 0, 5, 2 and 9 lines in slices of at most 5 lines.
    bounds = np.concatenate(([0], np.cumsum([3, 0, 5, 2, 9])))
    assert slice_bounds(bounds, 5) == [(0, 3), (3, 8), (8, 10), (10, 15), (15, 19)]
