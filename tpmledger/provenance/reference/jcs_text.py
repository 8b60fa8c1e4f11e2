"""RFC 8785 (JCS) text of the flat JSON values a summary signs: strings, numbers, null.

Written from RFC 8785 §3.2.2 and ECMAScript's ``Number::toString`` (ECMA-262 §6.1.6.1.20),
separately from the event-file writer (which prints floats through Polars) and from the
``rfc8785`` package; the tests hold all three to the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from json.encoder import encode_basestring

# RFC 8785 numbers are IEEE doubles: an integer beyond this has no exact JSON number.
SAFE_INTEGER = 2**53 - 1


class NotJcs(ValueError):
    """A value that has no RFC 8785 form (NaN, infinity, unsafe integer, other types)."""


def string_text(value: str) -> str:
    """A JSON string as JCS writes it: ``"`` and ``\\`` escaped, U+0000–U+001F as the short
    forms ``\\b \\t \\n \\f \\r`` or ``\\u00xx`` (lowercase hex), everything else verbatim
    (the stdlib encoder without ``ensure_ascii`` does exactly this)."""
    return encode_basestring(value)


def integer_text(value: int) -> str:
    """An integer JSON number (refused beyond ±(2^53 − 1), RFC 8785 §3.2.2.3)."""
    if abs(value) > SAFE_INTEGER:
        raise NotJcs(f"integer {value} is beyond ±(2^53 - 1)")
    return str(value)


def number_text(value: float) -> str:
    """A double as ECMAScript prints it: the shortest round-trip digits ``s`` (k of them)
    with decimal exponent ``n`` (value = 0.s × 10^n), plain for −6 < n ≤ 21, else
    ``d.ddde±x``."""
    if math.isnan(value) or math.isinf(value):
        raise NotJcs(f"{value} has no JSON number")
    if value == 0:
        return "0"  # -0 too
    text = repr(value)  # the shortest digits that read back as the same double
    if "e" not in text:
        # Python writes without an exponent only for 1e-4 <= |x| < 1e16, inside
        # ECMAScript's plain range, and then the same digits (``12.0`` is ``12``).
        return text[:-2] if text.endswith(".0") else text
    sign = "-" if value < 0 else ""
    mantissa, _, exponent = repr(abs(value)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = whole + fraction
    significant = digits.lstrip("0")
    n = len(whole) + int(exponent or 0) - (len(digits) - len(significant))
    s = significant.rstrip("0")
    k = len(s)
    if k <= n <= 21:
        body = s + "0" * (n - k)
    elif 0 < n <= 21:
        body = f"{s[:n]}.{s[n:]}"
    elif -6 < n <= 0:
        body = "0." + "0" * -n + s
    else:
        e = n - 1
        body = (s[0] + ("." + s[1:] if k > 1 else "")) + ("e+" if e >= 0 else "e-") + str(abs(e))
    return sign + body


def value_text(value: object) -> str:
    """JCS text of ``None``, a bool, an int, a float or a str."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int):
        return integer_text(value)
    if isinstance(value, float):
        return number_text(value)
    if isinstance(value, str):
        return string_text(value)
    raise NotJcs(f"{type(value).__name__} is not a flat JSON value")


def object_bytes(document: Mapping[str, object]) -> bytes:
    """The JCS UTF-8 bytes of a flat object: members sorted by their keys' UTF-16 units."""
    keys = sorted(document, key=lambda key: key.encode("utf-16-be"))
    members = ",".join(f"{string_text(key)}:{value_text(document[key])}" for key in keys)
    return ("{" + members + "}").encode("utf-8")
