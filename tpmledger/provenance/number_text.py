"""The canonical text of a number in signed bytes: ECMAScript's Number::toString.

RFC 8785 (JCS) prints numbers as ECMAScript does (ECMA-262, Number::toString, radix 10):
the shortest digits that read back as the same double, placed by the rules below. This
module is tpmledger's own definition of that text; the event file's fast path
(:mod:`tpmledger.provenance.event_values`) prints floats with a faster library, but only
after checking it against this function (golden vectors in
``tests/provenance/test_number_text.py``), so signed bytes never depend on another
library's idea of how a float looks.

Python's ``repr`` of a float gives the shortest round-trip digits (the same digits
ECMAScript requires; both pick the closest when several are shortest); only the placing
of the decimal point and the exponent is done here.
"""

from __future__ import annotations

import math


def number_text(value: float) -> str:
    """ECMAScript's text of a finite double: ``1``, ``1.5``, ``1e+21``, ``1e-7``, ``0``."""
    if not math.isfinite(value):
        raise ValueError(f"{value!r} has no canonical JSON text (NaN and infinities are refused)")
    if value == 0:
        return "0"  # -0 prints as 0 too
    sign = "-" if value < 0 else ""
    digits, point = _shortest_digits(abs(value))
    return sign + _placed(digits, point)


def _shortest_digits(magnitude: float) -> tuple[str, int]:
    """``(d, n)`` with ``magnitude == 0.d × 10**n``: ``d`` the shortest round-trip digits."""
    mantissa, _, exponent_text = repr(magnitude).partition("e")
    exponent = int(exponent_text) if exponent_text else 0
    whole, _, fraction = mantissa.partition(".")
    if whole == "0":
        significant = fraction.lstrip("0")
        point = exponent - (len(fraction) - len(significant))
    else:
        significant = whole + fraction
        point = exponent + len(whole)
    return significant.rstrip("0"), point


def _placed(digits: str, n: int) -> str:
    """ECMA-262 Number::toString steps 6-10 for digits ``digits`` and point ``n``."""
    k = len(digits)
    if k <= n <= 21:
        return digits + "0" * (n - k)
    if 0 < n <= 21:
        return f"{digits[:n]}.{digits[n:]}"
    if -6 < n <= 0:
        return "0." + "0" * -n + digits
    exponent = n - 1
    mark = "+" if exponent >= 0 else "-"
    head = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{head}e{mark}{abs(exponent)}"
