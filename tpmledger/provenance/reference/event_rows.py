"""The rows of ``events.jsonl``, a piece of whole lines at a time, with the file's order checked.

The file arrives as blocks of any size (read from disk, decompressed, or one bytes
object) and is cut into pieces of whole lines of about :data:`PIECE_BYTES`, so memory
follows the piece, not the file. Each piece is read by the grammar
(:mod:`~provenance.reference.line_grammar`) and, if any of its lines falls outside it, by
parsing (:func:`~provenance.reference.event_lines.parsed_rows`), which names the problem.
Then the rows' (``end_ns``, ``trace_id``, ``span_id``) order is checked, across pieces.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain, compress, islice
from operator import eq, itemgetter, le
from typing import Any

from tpmledger.provenance.reference.event_lines import (
    FIELD,
    NULL,
    CanonicalCheck,
    Row,
    parsed_rows,
    text_value,
)
from tpmledger.provenance.reference.line_grammar import LineGrammar

PIECE_BYTES = 256 << 10  # ~700 lines of ~370 bytes: the rows of a piece stay in cache


def read_rows(blocks: Iterable[bytes], check: CanonicalCheck) -> Iterator[list[Row]]:
    """The file's rows in file order, one piece at a time.

    Raises :class:`~provenance.reference.event_lines.EventFileError` at a line that is not
    an event; notes in ``check`` anything merely non-canonical (form, order, last ``\\n``).
    """
    grammar, order = LineGrammar(), _LineOrder(check)
    first_line = 1
    for piece in _pieces(blocks, check):
        rows = grammar.rows(piece)
        if rows is None:
            rows = parsed_rows(piece, first_line, check)
        order.check(rows, first_line)
        yield rows
        first_line += len(rows)  # one row a line


def _pieces(blocks: Iterable[bytes], check: CanonicalCheck) -> Iterator[bytes]:
    """Pieces of whole lines of at most about PIECE_BYTES (a longer line whole)."""
    rest = b""
    for block in blocks:
        data = rest + block if rest else block
        start = 0
        while True:
            end = data.rfind(b"\n", start, start + PIECE_BYTES) + 1
            if end <= start:  # no line ends within a piece's length: take the longer line whole
                end = data.find(b"\n", start + PIECE_BYTES) + 1
            if end <= start:
                break
            yield data[start:end]
            start = end
        rest = data[start:]
    if rest:
        check.note("the last line does not end with \\n", 0)
        yield rest


_END_AT, _TRACE, _SPAN = FIELD["end_ns"], FIELD["trace_id"], FIELD["span_id"]
_END = itemgetter(_END_AT)


def _order_key(row: Row) -> tuple[tuple[int, Any], ...]:
    # Absent values sort first, as in the sealer's sort.
    end, trace, span = row[_END_AT], row[_TRACE], row[_SPAN]
    return (
        (0, "") if end == NULL else (1, int(end[1:-1])),
        (0, "") if trace == NULL else (1, text_value(trace)),
        (0, "") if span == NULL else (1, text_value(span)),
    )


class _LineOrder:
    """Notes the first line out of (end_ns, trace_id, span_id) order, across pieces."""

    def __init__(self, check: CanonicalCheck) -> None:
        self.notes = check
        self.last: tuple[tuple[int, Any], ...] | None = None  # key of the previous piece's last row
        self.found = False

    def check(self, rows: list[Row], first_line: int) -> None:
        if not rows or self.found:
            return
        ends_text = list(map(_END, rows))
        if NULL not in ends_text:
            ends = [int(text[1:-1]) for text in ends_text]
            if all(map(le, ends, islice(ends, 1, None))):
                # Ordered by end time: only the first row and rows whose end time equals
                # the one before need their whole key compared.
                tied = compress(range(1, len(rows)), map(eq, ends, islice(ends, 1, None)))
                for i in chain([0], tied):
                    before = self.last if i == 0 else _order_key(rows[i - 1])
                    if not self._in_order(before, rows[i], first_line + i):
                        return
                self.last = _order_key(rows[-1])
                return
        for i, row in enumerate(rows):
            if not self._in_order(self.last, row, first_line + i):
                return
            self.last = _order_key(row)

    def _in_order(self, before: tuple[tuple[int, Any], ...] | None, row: Row, line: int) -> bool:
        if before is None or before <= _order_key(row):
            return True
        self.found = True
        self.notes.note(f"line {line} is out of (end_ns, trace_id, span_id) order", line)
        return False
