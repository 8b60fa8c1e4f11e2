"""The reference recomputation agrees with the sealer, and notices what the sealer must not do.

The sealer's side is the analytics code (Numba kernels, Polars) plus the compiled event
file writer; the reference's is :mod:`provenance.reference` (stdlib only). Both run on
the same events: hand-built, seeded and hypothesis-built runs.
"""

from __future__ import annotations

import json
import math
from typing import Any

import polars as pl
import pytest
import rfc8785
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.analytics.golden_events import MINUTE0_NS, golden_records
from tpmledger.analytics.kernels.run_figures import RunContext
from tpmledger.analytics.seal.memory_run import fold_events
from tpmledger.analytics.seal.minute_leaves import leaves_from_minutes
from tpmledger.provenance.event_file import build_event_file
from tpmledger.provenance.event_schema import EVENT_SCHEMA, NS_COLUMNS
from tpmledger.provenance.in_toto_statement import RUN_FIGURE_KEYS
from tpmledger.provenance.merkle import root_from_leaf_hashes
from tpmledger.provenance.minute_proofs import minute_tree_root
from tpmledger.provenance.reference.event_lines import (
    EVENT_KEYS,
    INTEGER,
    NANOSECONDS,
    NUMBER,
    TEXT,
    EventFileError,
)
from tpmledger.provenance.reference.jcs_text import NotJcs, number_text, object_bytes, string_text
from tpmledger.provenance.reference.rfc6962 import leaf_hash, tree_head
from tpmledger.provenance.summary_recompute import (
    Recomputed,
    figure_mismatches,
    recompute_from_events,
)

S = 1_000_000_000


def sealer_and_reference(events: pl.DataFrame) -> tuple[dict[str, Any], Recomputed]:
    """What the sealer signs (figures, leaves, root) and what the reference recomputes."""
    file = build_event_file(events)
    analysis = fold_events(events, RunContext())
    leaves = leaves_from_minutes(analysis.minutes, file)
    root, size = minute_tree_root(leaves)
    sealed = {
        "figures": json.loads(json.dumps(analysis.figures)),
        "leaves": leaves,
        "root": root,
        "size": size,
    }
    return sealed, recompute_from_events(file.tobytes())


def assert_agree(events: pl.DataFrame) -> Recomputed:
    sealed, again = sealer_and_reference(events)
    assert again.canonical, again.canonical_problem
    signed = {k: sealed["figures"][k] for k in RUN_FIGURE_KEYS}
    assert figure_mismatches(signed, {k: again.figures[k] for k in RUN_FIGURE_KEYS}) == []
    assert again.leaves == sealed["leaves"]
    assert (again.merkle_root, again.tree_size) == (sealed["root"], sealed["size"])
    return again


# --- RFC 8785 text -------------------------------------------------------------------


EDGE_FLOATS = (
    [1e21, 1e-7, 1e-6, 0.000001234, 123e-20, 5e-324, 1.7976931348623157e308, 1e16, 1e15],
    [-0.0, 0.1, 0.5, 2.0, 100.0, 123456789012345680000.0, 1.5e-7, -3.25, 4.35, 0.3],
)


@pytest.mark.parametrize("value", [v for group in EDGE_FLOATS for v in group])
def test_number_text_matches_rfc8785_at_the_edges(value: float) -> None:
    assert number_text(value) == rfc8785.dumps(value).decode()


@pytest.mark.slow
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_number_text_matches_rfc8785(value: float) -> None:
    assert number_text(value) == rfc8785.dumps(value).decode()


@given(st.text(st.characters(exclude_categories=["Cs"])))
def test_string_text_matches_rfc8785(value: str) -> None:
    assert string_text(value) == rfc8785.dumps(value).decode()


def test_nan_and_unsafe_integers_have_no_text() -> None:
    with pytest.raises(NotJcs):
        number_text(math.nan)
    with pytest.raises(NotJcs):
        object_bytes({"n": 2**53})


@given(st.dictionaries(st.text(max_size=4), st.none() | st.integers(-(2**53) + 1, 2**53 - 1)))
def test_object_bytes_match_rfc8785(document: dict[str, Any]) -> None:
    assert object_bytes(document) == rfc8785.dumps(document)


def test_event_keys_are_the_event_files_schema() -> None:
    kinds = {
        name: NANOSECONDS
        if name in NS_COLUMNS
        else {pl.String(): TEXT, pl.Int64(): INTEGER, pl.Float64(): NUMBER}[dtype]
        for name, dtype in EVENT_SCHEMA.items()
    }
    assert kinds == EVENT_KEYS


# --- RFC 6962 ------------------------------------------------------------------------


@pytest.mark.parametrize("size", [*range(0, 18), 31, 32, 33, 100])
def test_tree_head_equals_the_sealers_root(size: int) -> None:
    hashes = [leaf_hash(bytes([i % 256, i // 256])) for i in range(size)]
    assert tree_head(hashes) == root_from_leaf_hashes(hashes)


def test_tree_head_of_known_values() -> None:
    # RFC 6962 by hand: three leaves split 2 + 1.
    a, b, c = (leaf_hash(x) for x in (b"a", b"b", b"c"))
    import hashlib

    ab = hashlib.sha256(b"\x01" + a + b).digest()
    assert tree_head([a, b, c]) == hashlib.sha256(b"\x01" + ab + c).digest()
    assert tree_head([]) == hashlib.sha256(b"").digest()


# --- agreement with the sealer -------------------------------------------------------


def test_hand_built_run_agrees_and_has_the_hand_worked_figures() -> None:
    again = assert_agree(pl.DataFrame(golden_records(), schema=EVENT_SCHEMA))
    figures = again.figures
    assert figures["attempts"] == 8
    assert figures["logical_calls"] == 7
    assert figures["retry_causes"] == {"rate_limit": 1}
    # Minutes 1 and 3 both reach 660: a tie goes to the earlier.
    assert figures["peak_minute"]["minute_utc"] == "2026-02-01T03:45:00Z"
    assert figures["peak_minute"]["tpm_total"] == 660
    assert figures["sustained_tpm_total"] == 660.0  # median of minutes 1..3: 660, 0, 660
    assert [leaf["calls_in_minute"] for leaf in again.leaves] == [3, 2, 0, 1, 2]


@pytest.mark.parametrize(
    "overrides",
    [
        {"resend_count": None},  # retries by position within the call
        {"resend_count": None, "call_id": None},  # implicit ids: retries not measured
    ],
)
def test_hand_built_variants_agree(overrides: dict[str, Any]) -> None:
    records = golden_records(**overrides)
    if overrides.get("call_id", "") is None:
        for record in records:
            record["call_id"] = record["span_id"]
    assert_agree(pl.DataFrame(records, schema=EVENT_SCHEMA))


def test_seeded_sharded_run_agrees() -> None:
    from tests.provenance.sharded_run import SHARDS, sharded_events

    again = assert_agree(sharded_events())
    assert again.figures["shard_count"] == SHARDS


@st.composite
def hypothesis_runs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Small runs that reach the corner cases: ties in end time and in call order, calls
    with several attempts, absent resend counts, implicit ids, empty minutes, odd text."""
    count = draw(st.integers(1, 30))
    shards = draw(st.lists(st.sampled_from(["0", "1", "b", "é", 'q"\n']), min_size=1, max_size=3))
    explicit = draw(st.booleans())
    resend = draw(st.sampled_from(["all", "none", "some"]))
    calls = draw(st.integers(1, count))
    traces = draw(st.integers(1, 3))
    records = []
    for _ in range(count):
        end = MINUTE0_NS + draw(st.integers(0, 8)) * 20 * S + draw(st.sampled_from([0, 1, 7]))
        ok = draw(st.booleans())
        span = f"{draw(st.integers(0, 3 * count)):016x}"
        known = resend == "all" or (resend == "some" and draw(st.booleans()))
        records.append(
            {
                "call_id": f"c{draw(st.integers(0, calls - 1))}" if explicit else span,
                "completion_tokens": draw(st.none() | st.integers(0, 5000)) if ok else None,
                "end_ns": end,
                "error_type": None if ok else draw(st.sampled_from([None, "http_429", "timeout"])),
                "http_status": draw(st.sampled_from([None, 200, 429])),
                "model": "m",
                "prompt_tokens": draw(st.none() | st.integers(0, 5000)),
                "queue_wait_s": draw(st.none() | st.floats(0, 50, allow_nan=False)),
                "resend_count": draw(st.integers(0, 2)) if known else None,
                "run_id": "hypothesis",
                "shard_id": draw(st.sampled_from(shards)),
                "span_id": span,
                "start_ns": end - draw(st.sampled_from([0, S, 5 * S])),
                "status": "ok" if ok else "error",
                "trace_id": f"{draw(st.integers(0, traces)):032x}",
                "ttft_s": draw(st.none() | st.floats(1e-9, 30, allow_nan=False)) if ok else None,
            }
        )
    return records


@pytest.mark.slow
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hypothesis_runs())
def test_hypothesis_runs_agree(records: list[dict[str, Any]]) -> None:
    assert_agree(pl.DataFrame(records, schema=EVENT_SCHEMA))


# --- what the reference refuses or flags ---------------------------------------------


def _golden_bytes() -> bytes:
    return build_event_file(pl.DataFrame(golden_records(), schema=EVENT_SCHEMA)).tobytes()


def test_lines_out_of_order_are_not_canonical() -> None:
    lines = _golden_bytes().splitlines(keepends=True)
    lines[0], lines[1] = lines[1], lines[0]
    again = recompute_from_events(b"".join(lines))
    assert again.canonical_problem == "line 2 is out of (end_ns, trace_id, span_id) order"


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (b'"ttft_s":0.1}', b'"ttft_s":0.10}', "line 1 is not the RFC 8785 form of its event"),
        (b'{"call_id"', b'{ "call_id"', "line 1 is not the RFC 8785 form of its event"),
        (b'"end_ns":"1769917450', b'"end_ns":"01769917450', "line 1 is not the RFC 8785 form"),
    ],
)
def test_non_canonical_text_is_named(old: bytes, new: bytes, problem: str) -> None:
    again = recompute_from_events(_golden_bytes().replace(old, new, 1))
    assert again.canonical_problem is not None
    assert again.canonical_problem.startswith(problem)


def test_missing_final_newline_is_not_canonical() -> None:
    again = recompute_from_events(_golden_bytes().rstrip(b"\n"))
    assert again.canonical_problem == "the last line does not end with \\n"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (b'"model":"gpt-golden",', b"", "line 1 does not have exactly the event keys"),
        (b'"prompt_tokens":100', b'"prompt_tokens":"100"', "line 1: expected an integer"),
        (b'"end_ns":"1769917450000000000"', b'"end_ns":1769917450000000000', "decimal string"),
        (b"}\n", b"\n", "line 1 is not JSON"),
    ],
)
def test_lines_that_are_not_events_are_refused(old: bytes, new: bytes, message: str) -> None:
    with pytest.raises(EventFileError, match=message):
        recompute_from_events(_golden_bytes().replace(old, new, 1))


def test_a_changed_token_count_changes_figures_and_leaves() -> None:
    sealed, _ = sealer_and_reference(pl.DataFrame(golden_records(), schema=EVENT_SCHEMA))
    again = recompute_from_events(
        _golden_bytes().replace(b'"prompt_tokens":300', b'"prompt_tokens":301', 1)
    )
    assert again.canonical
    signed = {k: sealed["figures"][k] for k in RUN_FIGURE_KEYS}
    mismatches = figure_mismatches(signed, {k: again.figures[k] for k in RUN_FIGURE_KEYS})
    assert "peak_minute.tpm_total: signed 660, recomputed 661" in mismatches
    assert again.merkle_root != sealed["root"]
