"""The canonical event line as a regular expression: reading ``events.jsonl`` without parsing JSON.

A canonical line is determined by its values (keys in a fixed order, no spaces, each value
written the one way RFC 8785 writes it), so its bytes can be checked against a grammar
instead of being parsed and written again. The expression below, built from
:data:`~provenance.reference.event_lines.EVENT_KEYS`, matches such a line and captures it
with each field's text (a :data:`~provenance.reference.event_lines.Row`). Per kind of
value, ``null`` always allowed:

- text: ``"…"`` with ``"``, ``\\`` and U+0000–U+001F escaped as RFC 8785 escapes them (the
  short forms ``\\b \\t \\n \\f \\r``, else ``\\u00xx`` in lowercase) and nothing else
  escaped; the piece must be valid UTF-8;
- integer: no sign on 0, no leading zero, at most 15 digits (so within ±(2^53 − 1));
- nanoseconds: a decimal string with the same rules, any length;
- number: JSON number syntax with a lowercase ``e`` and a signed exponent, and the digits
  ECMAScript would print for that double: checked per distinct text against
  :func:`~provenance.reference.jcs_text.number_text`.

The grammar only accepts. A piece of the file with any line outside it (a non-event, a
non-canonical line, or merely a 16-digit integer) is read by
:func:`~provenance.reference.event_lines.parsed_rows`, which decides and names the problem;
the tests hold the two readings to the same rows on every line the grammar accepts.
"""

from __future__ import annotations

import re
from operator import itemgetter

from tpmledger.provenance.reference.event_lines import (
    EVENT_KEYS,
    FIELD,
    INTEGER,
    NANOSECONDS,
    NULL,
    NUMBER,
    TEXT,
    Row,
)
from tpmledger.provenance.reference.jcs_text import NotJcs, number_text

# Possessive quantifiers: nothing a field matched is ever given back (no backtracking).
_PLAIN = rb'[^"\\\x00-\x1f]*+'  # a run of characters written as they are
_ESCAPE = rb'\\(?:["\\bfnrt]|u00(?:0[0-7bef]|1[0-9a-f]))'  # RFC 8785's escapes, and only those
_KINDS = {
    TEXT: rb'null|"' + _PLAIN + rb"(?:" + _ESCAPE + _PLAIN + rb')*+"',
    INTEGER: rb"null|0|-?[1-9][0-9]{0,14}+",
    NANOSECONDS: rb'null|"(?:0|-?[1-9][0-9]*+)"',
    NUMBER: rb"null|-?(?:0|[1-9][0-9]*+)(?:\.[0-9]++)?+(?:e[+-][1-9][0-9]*+)?+",
}
_FIELDS = rb",".join(
    b'"' + re.escape(key.encode()) + b'":(' + _KINDS[kind] + b")"
    for key, kind in EVENT_KEYS.items()
)
_LINE = re.compile(rb"(\{" + _FIELDS + rb"\}\n)")
_NUMBER_TEXTS = [itemgetter(FIELD[key]) for key, kind in EVENT_KEYS.items() if kind == NUMBER]
_LINE_TEXT = itemgetter(0)


class LineGrammar:
    """Reads pieces of the file by the grammar; remembers the number texts already checked."""

    KNOWN_NUMBERS = 1 << 16  # distinct number texts remembered at most (then forgotten)

    def __init__(self) -> None:
        self._numbers: set[bytes] = {NULL}

    def rows(self, piece: bytes) -> list[Row] | None:
        """The rows of ``piece`` (whole lines) if every line is canonical by the grammar."""
        rows: list[Row] = _LINE.findall(piece)
        # Matches never overlap, so they cover the piece only if every line matched.
        if sum(map(len, map(_LINE_TEXT, rows))) != len(piece):
            return None
        if not piece.isascii():
            try:
                piece.decode("utf-8")
            except UnicodeDecodeError:
                return None
        numbers = set().union(*(map(text, rows) for text in _NUMBER_TEXTS)) - self._numbers
        if numbers and not all(map(_is_number_text, numbers)):
            return None
        if len(self._numbers) + len(numbers) > self.KNOWN_NUMBERS:
            self._numbers = {NULL}
        self._numbers |= numbers
        return rows


def _is_number_text(text: bytes) -> bool:
    """Whether ``text`` is what :func:`number_text` writes for the double it reads as."""
    try:
        return number_text(float(text)) == text.decode()
    except (NotJcs, ValueError):  # NaN/infinity: outside the format, for the parser to name
        return False
