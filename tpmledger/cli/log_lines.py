"""One log record, one line: control characters in messages are escaped.

Run ids, shard ids and model names are whatever exporters sent; one holding a newline
must not split a log line (or forge a second one). The message is escaped (``\\n`` for a
newline, ``\\x1b`` for ESC, ``\\u2028`` for a line separator); a traceback appended to a
record stays as Python prints it.
"""

from __future__ import annotations

import logging
import unicodedata

_NAMED = {"\n": "\\n", "\r": "\\r"}


def one_line(text: str) -> str:
    """``text`` with every character that could break or rewrite a line escaped."""
    if text.isprintable():
        return text
    return "".join(_escape(c) for c in text)


def _escape(char: str) -> str:
    if char in _NAMED:
        return _NAMED[char]
    if char == "\t" or unicodedata.category(char) not in ("Cc", "Zl", "Zp"):
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


class OneLineFormatter(logging.Formatter):
    """A :class:`logging.Formatter` whose messages never span lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = one_line(record.message)
        return super().formatMessage(record)


def one_line_handler(fmt: str) -> logging.Handler:
    """A stderr handler (what :func:`logging.basicConfig` makes) with one-line messages."""
    handler = logging.StreamHandler()
    handler.setFormatter(OneLineFormatter(fmt))
    return handler
