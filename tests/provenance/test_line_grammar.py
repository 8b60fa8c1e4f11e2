"""The grammar reading of ``events.jsonl`` agrees with reading by parsing, and only accepts.

:mod:`provenance.reference.line_grammar` reads canonical lines without parsing JSON; every
line it does not accept is parsed (:func:`provenance.reference.event_lines.parsed_rows`).
So the verifier stays exact if (1) the grammar gives the parsed rows on every canonical
line and (2) it never accepts a line that parsing finds wrong. Both are checked here on
generated events and on mutated lines, then the file-level reading (pieces, blocks, order
across pieces, one pass in ``verify_export``) against reading the file whole by parsing.
"""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.analytics.golden_events import golden_records
from tests.provenance.sharded_run import RUN_ID, sharded_events
from tpmledger.analytics.proofs.summary_export import summary_from_events, write_export
from tpmledger.provenance.event_file import build_event_file
from tpmledger.provenance.event_schema import EVENT_SCHEMA
from tpmledger.provenance.reference import event_rows
from tpmledger.provenance.reference.event_lines import (
    EVENT_KEYS,
    INTEGER,
    NANOSECONDS,
    NUMBER,
    TEXT,
    CanonicalCheck,
    EventFileError,
    field_texts,
    line_text,
    parsed_rows,
)
from tpmledger.provenance.reference.line_grammar import LineGrammar
from tpmledger.provenance.signing_keys import SigningKey
from tpmledger.provenance.summary_recompute import (
    Recomputed,
    recompute_from_blocks,
    recompute_from_events,
)
from tpmledger.provenance.summary_verify import verify_export

GRAMMAR_INTEGER = 10**15 - 1  # wider integers (16 digits) are left to parsing
VALUES = {
    TEXT: st.none() | st.text(st.characters(exclude_categories=["Cs"]), max_size=6),
    INTEGER: st.none() | st.integers(-GRAMMAR_INTEGER, GRAMMAR_INTEGER),
    NANOSECONDS: st.none() | st.integers(-(10**20), 10**20).map(str),
    # As JSON parses them: a double, or an integer written without a fraction.
    NUMBER: st.none() | st.floats(allow_nan=False, allow_infinity=False) | st.integers(),
}


@st.composite
def parsed_events(draw: st.DrawFn) -> dict[str, Any]:
    """An event as ``json`` parses a line: any value of each key's kind."""
    return {key: draw(VALUES[kind]) for key, kind in EVENT_KEYS.items()}


def canonical_line(event: dict[str, Any]) -> bytes:
    return line_text(field_texts(event)).encode() + b"\n"


def parsed(piece: bytes) -> tuple[list[tuple[bytes, ...]], str | None]:
    check = CanonicalCheck()
    return parsed_rows(piece, 1, check), check.problem


def golden_bytes() -> bytes:
    return build_event_file(pl.DataFrame(golden_records(), schema=EVENT_SCHEMA)).tobytes()


def outcome(again: Recomputed) -> tuple[Any, ...]:
    return again.figures, again.leaves, again.merkle_root, again.canonical_problem


# --- one piece: grammar against parsing -------------------------------------------------


@pytest.mark.slow
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(parsed_events(), min_size=1, max_size=4))
def test_the_grammar_reads_canonical_lines_as_parsing_does(events: list[dict[str, Any]]) -> None:
    piece = b"".join(canonical_line(event) for event in events)
    assert LineGrammar().rows(piece) == parsed(piece)[0]
    assert parsed(piece)[1] is None


MUTATIONS = [b" ", b"0", b"1", b"9", b"-", b"+", b".", b"e", b"E", b'"', b"\\", b"/", b"u"]
MUTATIONS += [b"\n", b"\t", b"\x00", b"\x7f", b"\xc3", b"\xe9", b"\xed\xa0\x80", b",", b"}", b"n"]


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(parsed_events(), min_size=1, max_size=2),
    st.integers(0, 10**6),
    st.sampled_from(["replace", "insert", "delete"]),
    st.sampled_from(MUTATIONS),
)
@pytest.mark.slow
def test_the_grammar_accepts_only_lines_parsing_finds_canonical(
    events: list[dict[str, Any]], position: int, how: str, byte: bytes
) -> None:
    piece = bytearray(b"".join(canonical_line(event) for event in events))
    at = position % len(piece)
    piece[at : at + (0 if how == "insert" else 1)] = b"" if how == "delete" else byte
    rows = LineGrammar().rows(bytes(piece))
    if rows is not None:
        assert parsed(bytes(piece)) == (rows, None)


NOT_RFC_8785 = "line 1 is not the RFC 8785 form of its event"


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        (b'"ttft_s":0.1}', b'"ttft_s":0.10}', NOT_RFC_8785),
        (b'"ttft_s":0.1}', b'"ttft_s":1e-1}', NOT_RFC_8785),
        (b'"ttft_s":0.1}', b'"ttft_s":0.1E0}', NOT_RFC_8785),
        (b'"queue_wait_s":null', b'"queue_wait_s":5.0', NOT_RFC_8785),
        (b'"queue_wait_s":null', b'"queue_wait_s":-0', NOT_RFC_8785),
        (b'"model":"gpt-golden"', b'"model":"gpt\\u002dgolden"', NOT_RFC_8785),
        (b'"model":"gpt-golden"', b'"model":"gpt\\/golden"', NOT_RFC_8785),
        (b'"model":"gpt-golden"', b'"model":"gpt\\u000agolden"', NOT_RFC_8785),
        (b'"model":"gpt-golden"', b'"model":"gpt\\u001Fgolden"', NOT_RFC_8785),
        (b'"http_status":200,', b'"http_status": 200,', NOT_RFC_8785),
        (
            b'"call_id":"c1","completion_tokens":50,',
            b'"completion_tokens":50,"call_id":"c1",',
            NOT_RFC_8785,
        ),
        (b'"prompt_tokens":100', b'"prompt_tokens":1000000000000000', None),  # 16 digits, safe
    ],
)
def test_what_the_grammar_leaves_to_parsing(old: bytes, new: bytes, problem: str | None) -> None:
    data = golden_bytes()
    first = data[: data.index(b"\n") + 1]
    assert old in first
    assert LineGrammar().rows(first.replace(old, new, 1)) is None
    again = recompute_from_events(data.replace(old, new, 1))
    assert again.canonical_problem == problem


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (b'"prompt_tokens":100', b'"prompt_tokens":9007199254740992', "beyond"),
        (b'"prompt_tokens":100', b'"prompt_tokens":100.0', "expected an integer"),
        (b'"http_status":200', b'"http_status":0200', "line 1 is not JSON"),
        (b'"model":"gpt-golden"', b'"model":"gpt\xffgolden"', "line 1 is not JSON"),
        (b'"ttft_s":0.1}', b'"ttft_s":NaN}', "has no JSON number"),
    ],
)
def test_lines_the_grammar_leaves_and_parsing_refuses(old: bytes, new: bytes, message: str) -> None:
    data = golden_bytes()
    first = data[: data.index(b"\n") + 1]
    assert LineGrammar().rows(first.replace(old, new, 1)) is None
    with pytest.raises(EventFileError, match=message):
        recompute_from_events(data.replace(old, new, 1))


# --- the file: pieces, blocks, order, one pass --------------------------------------------


@pytest.fixture(scope="module")
def sharded_bytes() -> bytes:
    return build_event_file(sharded_events()).tobytes()


def parsed_only(monkeypatch: pytest.MonkeyPatch, data: bytes) -> Recomputed:
    """The file read by parsing alone, as the reference read it before the grammar."""
    with monkeypatch.context() as patch:
        patch.setattr(LineGrammar, "rows", lambda self, piece: None)
        return recompute_from_events(data)


@pytest.mark.slow
@pytest.mark.parametrize("piece_bytes", [1, 500, 4096, 1 << 20])
@pytest.mark.parametrize("block_bytes", [1, 333, 10**9])
def test_pieces_and_blocks_do_not_change_the_result(
    sharded_bytes: bytes, monkeypatch: pytest.MonkeyPatch, piece_bytes: int, block_bytes: int
) -> None:
    whole = parsed_only(monkeypatch, sharded_bytes)
    assert whole.canonical
    monkeypatch.setattr(event_rows, "PIECE_BYTES", piece_bytes)
    blocks = [sharded_bytes[i : i + block_bytes] for i in range(0, len(sharded_bytes), block_bytes)]
    assert outcome(recompute_from_blocks(blocks)) == outcome(whole)


@pytest.mark.parametrize(
    "records",
    [
        golden_records(),
        golden_records(resend_count=None),
        [dict(r, call_id=r["span_id"]) for r in golden_records(resend_count=None)],
    ],
)
def test_grammar_and_parsing_give_the_same_figures(
    records: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = build_event_file(pl.DataFrame(records, schema=EVENT_SCHEMA)).tobytes()
    monkeypatch.setattr(event_rows, "PIECE_BYTES", 700)  # two or three lines a piece
    assert outcome(recompute_from_events(data)) == outcome(parsed_only(monkeypatch, data))


@pytest.mark.parametrize("piece_lines", [1, 2, 3, 50])
def test_lines_out_of_order_are_named_across_pieces(
    sharded_bytes: bytes, monkeypatch: pytest.MonkeyPatch, piece_lines: int
) -> None:
    lines = sharded_bytes.splitlines(keepends=True)
    lines[5], lines[6] = lines[6], lines[5]  # line 7 now ends before line 6
    monkeypatch.setattr(event_rows, "PIECE_BYTES", piece_lines * max(map(len, lines)))
    again = recompute_from_events(b"".join(lines))
    assert again.canonical_problem == "line 7 is out of (end_ns, trace_id, span_id) order"


def test_equal_end_times_are_ordered_by_trace_and_span(monkeypatch: pytest.MonkeyPatch) -> None:
    records = golden_records()
    for record in records[:3]:
        record["end_ns"] = records[0]["end_ns"]  # three lines end together
    data = build_event_file(pl.DataFrame(records, schema=EVENT_SCHEMA)).tobytes()
    assert recompute_from_events(data).canonical
    lines = data.splitlines(keepends=True)
    lines[1], lines[2] = lines[2], lines[1]
    monkeypatch.setattr(event_rows, "PIECE_BYTES", len(lines[0]) + 1)
    again = recompute_from_events(b"".join(lines))
    assert again.canonical_problem == "line 3 is out of (end_ns, trace_id, span_id) order"


def _export(directory: Path) -> Path:
    key = SigningKey(Ed25519PrivateKey.generate(), directory / "k")
    summary = summary_from_events(
        sharded_events(), key, run_id=RUN_ID, computed_at="2026-02-01T04:00:00.000Z"
    )
    write_export(summary, directory / "export")
    return directory / "export"


def test_a_compressed_export_verifies_in_one_pass(tmp_path: Path) -> None:
    export = _export(tmp_path)
    events = export / "events.jsonl"
    (export / "events.jsonl.gz").write_bytes(gzip.compress(events.read_bytes()))
    events.unlink()
    report = verify_export(export)
    assert report.ok, report.as_dict()


def test_a_file_that_cannot_be_read_is_still_hashed_whole(tmp_path: Path) -> None:
    export = _export(tmp_path)
    events = export / "events.jsonl"
    data = events.read_bytes()
    middle = data.index(b"\n", len(data) // 2) + 1
    broken = data[:middle] + b"{}\n" + data[middle:]
    events.write_bytes(broken)
    failed = {c.name: c.detail for c in verify_export(export).checks if not c.ok}
    assert hashlib.sha256(broken).hexdigest() in failed["events digest"]
    lines = broken.count(b"\n")
    assert f"{lines} lines" in failed["events digest"]
    assert failed["events canonical"].startswith("events.jsonl cannot be read: line ")
