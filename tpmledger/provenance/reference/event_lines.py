"""The event line format, and reading lines by parsing them with ``json`` and writing them again.

The format (docs/provenance.md#the-canonical-event-file--eventsjsonl): every line is the
RFC 8785 text of an object with exactly the keys below, nanosecond times as decimal
strings, absent values ``null``, ``\\n`` after every line, lines ordered by
(``end_ns``, ``trace_id``, ``span_id``).

Lines are read as **rows**: the line's bytes (with its ``\\n``), then the RFC 8785 text of
each field in :data:`EVENT_KEYS` order (``b'"ok"'``, ``b"512"``, ``b'"1769917440000000000"'``,
``b"null"``). :func:`parsed_rows` gets them by parsing each line with the stdlib ``json``
module and writing every value again with :mod:`provenance.reference.jcs_text`; a line is
canonical when it comes back byte for byte. It reads any line of the format, names what
is wrong with it, and is the reading the faster :mod:`~provenance.reference.line_grammar`
is held to (it accepts only lines that this reading finds canonical, with the same row).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from tpmledger.provenance.reference.jcs_text import NotJcs, integer_text, number_text, string_text

# The keys of an event line and the kind of value each holds (the format's own
# declaration; a test holds it equal to provenance.event_schema.EVENT_SCHEMA).
TEXT, INTEGER, NANOSECONDS, NUMBER = "text", "integer", "nanoseconds", "number"
EVENT_KEYS: dict[str, str] = {
    "call_id": TEXT,
    "completion_tokens": INTEGER,
    "end_ns": NANOSECONDS,
    "error_type": TEXT,
    "http_status": INTEGER,
    "model": TEXT,
    "prompt_tokens": INTEGER,
    "queue_wait_s": NUMBER,
    "resend_count": INTEGER,
    "run_id": TEXT,
    "shard_id": TEXT,
    "span_id": TEXT,
    "start_ns": NANOSECONDS,
    "status": TEXT,
    "trace_id": TEXT,
    "ttft_s": NUMBER,
}
_KEY_SET = frozenset(EVENT_KEYS)
_DECODER = json.JSONDecoder()

Row = tuple[bytes, ...]
"""A line (with its ``\\n``) followed by the RFC 8785 text of each field, in key order."""

FIELD: dict[str, int] = {key: i + 1 for i, key in enumerate(EVENT_KEYS)}
"""Where each key's text sits in a :data:`Row`."""

NULL = b"null"


class EventFileError(ValueError):
    """A line that is not an event of the format at all (figures cannot be computed)."""


class CanonicalCheck:
    """The first reason the file is not canonical, if any (``problem`` is None when it is).

    Pieces of the file are checked in turn and each check in a piece covers all its lines,
    so problems are not noted in line order; the one kept is the first noted for the
    earliest line (line 0: the file as a whole).
    """

    def __init__(self) -> None:
        self.problem: str | None = None
        self._line: int | None = None

    def note(self, problem: str, line: int) -> None:
        if self._line is None or line < self._line:
            self.problem, self._line = problem, line


def text_value(text: bytes) -> str | None:
    """The string a row's RFC 8785 text field holds (None for ``null``)."""
    if text == NULL:
        return None
    if b"\\" in text:
        return str(json.loads(text))
    return text[1:-1].decode("utf-8")


def _text(value: Any) -> str:
    if type(value) is not str:
        raise NotJcs(f"expected a string, found {type(value).__name__}")
    return string_text(value)


def _integer(value: Any) -> str:
    if type(value) is not int:
        raise NotJcs(f"expected an integer, found {type(value).__name__}")
    return integer_text(value)


def _nanoseconds(value: Any) -> str:
    digits = value[1:] if isinstance(value, str) and value.startswith("-") else value
    if not (isinstance(digits, str) and digits.isascii() and digits.isdigit()):
        raise NotJcs(f"must be a decimal string, found {value!r}")
    return f'"{int(value)}"'


def _number(value: Any) -> str:
    if type(value) is int:
        return number_text(float(value))  # "1" parses as int; its double prints the same
    if type(value) is not float:
        raise NotJcs(f"expected a number, found {type(value).__name__}")
    return number_text(value)


_WRITERS: dict[str, Callable[[Any], str]] = {
    TEXT: _text,
    INTEGER: _integer,
    NANOSECONDS: _nanoseconds,
    NUMBER: _number,
}
_LAYOUT = tuple((key, f"{string_text(key)}:", _WRITERS[kind]) for key, kind in EVENT_KEYS.items())


def field_texts(event: dict[str, Any]) -> list[str]:
    """The RFC 8785 text of each field of a parsed event, in key order."""
    texts = []
    for key, _, write in _LAYOUT:
        value = event[key]
        try:
            texts.append("null" if value is None else write(value))
        except NotJcs as exc:
            if write is _nanoseconds:
                raise NotJcs(f"{key} {exc}") from exc
            raise
    return texts


def line_text(texts: list[str]) -> str:
    """The canonical line (without the ``\\n``) of an event's field texts."""
    members = (label + text for (_, label, _), text in zip(_LAYOUT, texts, strict=True))
    return "{" + ",".join(members) + "}"


def _lines(piece: bytes) -> list[bytes]:
    """The lines of ``piece``, each with its ``\\n`` (the last one may lack it)."""
    lines = piece.split(b"\n")
    last = lines.pop()
    return [line + b"\n" for line in lines] + ([last] if last else [])


def parsed_rows(piece: bytes, first_line: int, check: CanonicalCheck) -> list[Row]:
    """The rows of ``piece`` (whole lines; line ``first_line`` of the file first).

    Raises :class:`EventFileError` for a line that is not an event object with the
    format's keys and value kinds; notes in ``check`` a line that is merely not in
    canonical form. Order is checked elsewhere, over rows however they were read.
    """
    rows: list[Row] = []
    for number, line in enumerate(_lines(piece), first_line):
        try:
            event = _DECODER.decode(line.decode("utf-8"))
        except ValueError as exc:
            raise EventFileError(f"line {number} is not JSON: {exc}") from exc
        if not isinstance(event, dict) or event.keys() != _KEY_SET:
            raise EventFileError(
                f"line {number} does not have exactly the event keys ({', '.join(EVENT_KEYS)})"
            )
        try:
            texts = field_texts(event)
            canonical = line_text(texts).encode("utf-8")
        except (NotJcs, UnicodeEncodeError) as exc:
            raise EventFileError(f"line {number}: {exc}") from exc
        if line.rstrip(b"\n") != canonical:
            check.note(f"line {number} is not the RFC 8785 form of its event", number)
        rows.append((line, *(text.encode("utf-8") for text in texts)))
    return rows
