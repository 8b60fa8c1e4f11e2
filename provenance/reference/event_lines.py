"""Reading ``events.jsonl`` line by line and checking that it is canonical.

The format (docs/provenance.md#the-canonical-event-file--eventsjsonl): every line is the
RFC 8785 text of an object with exactly the keys below, nanosecond times as decimal
strings, absent values ``null``, ``\\n`` after every line, lines ordered by
(``end_ns``, ``trace_id``, ``span_id``). Each line is parsed with the stdlib ``json``
module and written again with :mod:`provenance.reference.jcs_text`; the file is canonical
when every line comes back byte for byte and the order holds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from provenance.reference.jcs_text import NotJcs, integer_text, number_text, string_text

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


class EventFileError(ValueError):
    """A line that is not an event of the format at all (figures cannot be computed)."""


def _text(value: Any) -> str:
    if type(value) is not str:
        raise NotJcs(f"expected a string, found {type(value).__name__}")
    return string_text(value)


def _integer(value: Any) -> str:
    if type(value) is not int:
        raise NotJcs(f"expected an integer, found {type(value).__name__}")
    return integer_text(value)


def _nanoseconds(value: Any) -> str:
    # Checked (and turned into an int) by _parse_nanoseconds before the line is written.
    return f'"{value}"'


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


def line_text(event: dict[str, Any]) -> str:
    """The canonical text of one event (without the ``\\n``); ns values already ints."""
    parts = []
    for key, label, write in _LAYOUT:
        value = event[key]
        parts.append(label + ("null" if value is None else write(value)))
    return "{" + ",".join(parts) + "}"


def _parse_nanoseconds(event: dict[str, Any], key: str) -> None:
    value = event[key]
    if value is None:
        return
    digits = value[1:] if isinstance(value, str) and value.startswith("-") else value
    if not (isinstance(digits, str) and digits.isascii() and digits.isdigit()):
        raise NotJcs(f"{key} must be a decimal string, found {value!r}")
    event[key] = int(value)


def _order_key(event: dict[str, Any]) -> tuple[Any, ...]:
    # Absent values sort first, as in the sealer's sort.
    return tuple((0, "") if event[k] is None else (1, event[k]) for k in _ORDER)


_ORDER = ("end_ns", "trace_id", "span_id")


class CanonicalCheck:
    """The first reason the file is not canonical, if any (``problem`` is None when it is)."""

    def __init__(self) -> None:
        self.problem: str | None = None

    def note(self, problem: str) -> None:
        if self.problem is None:
            self.problem = problem


def read_lines(data: bytes, check: CanonicalCheck) -> Iterator[tuple[bytes, dict[str, Any]]]:
    """Each line (with its ``\\n``) and its event, ns values as ints, in file order.

    Raises :class:`EventFileError` for a line that is not an event object with the
    format's keys and value kinds; records in ``check`` anything merely non-canonical.
    """
    if data and not data.endswith(b"\n"):
        check.note("the last line does not end with \\n")
    previous: tuple[Any, ...] | None = None
    start = 0
    number = 0
    size = len(data)
    while start < size:
        end = data.find(b"\n", start)
        end = size if end < 0 else end + 1
        line = data[start:end]
        start = end
        number += 1
        try:
            event = _DECODER.decode(line.decode("utf-8"))
        except ValueError as exc:
            raise EventFileError(f"line {number} is not JSON: {exc}") from exc
        if not isinstance(event, dict) or event.keys() != _KEY_SET:
            raise EventFileError(
                f"line {number} does not have exactly the event keys ({', '.join(EVENT_KEYS)})"
            )
        try:
            _parse_nanoseconds(event, "end_ns")
            _parse_nanoseconds(event, "start_ns")
            text = line_text(event).encode("utf-8")
        except (NotJcs, UnicodeEncodeError) as exc:
            raise EventFileError(f"line {number}: {exc}") from exc
        if line.rstrip(b"\n") != text:
            check.note(f"line {number} is not the RFC 8785 form of its event")
        order = _order_key(event)
        if previous is not None and order < previous:
            check.note(f"line {number} is out of (end_ns, trace_id, span_id) order")
        previous = order
        yield line, event
