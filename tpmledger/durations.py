"""Ages written as ``30d``, ``12h``, ``2w``, ``90m`` or plain seconds (retention)."""

from __future__ import annotations

import re
from typing import Final

#: Span times are integer nanoseconds since the Unix epoch; a minute bucket is the UTC minute
#: of an attempt's end (docs/metrics.md#minute-table). Every layer takes these from here.
SECOND_NS: Final = 1_000_000_000
MINUTE_NS: Final = 60 * SECOND_NS

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$")
_SCALE = {"s": 1.0, None: 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0}


def parse_age(text: str) -> float:
    """The age in seconds; ``ValueError`` saying what to write instead."""
    match = _AGE.match(text)
    if not match or float(match.group(1)) <= 0:
        raise ValueError(f"not a positive duration: {text!r} (try 30d, 12h, 2w)")
    return float(match.group(1)) * _SCALE[match.group(2)]
