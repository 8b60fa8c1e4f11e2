"""Service-level objectives for goodput: ``ttft=0.5,latency=10`` (docs/metrics.md#goodput).

An SLO is declared on the command line (``--slo`` of ``analyze`` and ``compare``) or as the
default ``TPMLEDGER_SLO``. Each key is a limit in seconds that an attempt must meet to
count as good; keys not given are not checked. The canonical text (keys sorted, numbers in
their shortest form) names the SLO in storage and output, so ``latency=10,ttft=0.5`` and
``ttft=0.50,latency=10.0`` are the same SLO.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

#: SLO key → what it limits, in seconds.
SLO_KEYS: Final = {
    "ttft": "time to first token of the attempt",
    "latency": "the attempt's end − start (its time in the slot)",
}


class SloError(ValueError):
    """An SLO text that cannot be read; the message says what to write instead."""


@dataclass(frozen=True)
class Slo:
    """Limits in seconds; ``None`` = not part of the SLO."""

    ttft_s: float | None = None
    latency_s: float | None = None

    @property
    def text(self) -> str:
        """Canonical text: ``latency=10,ttft=0.5`` (sorted keys, shortest numbers)."""
        parts = {"latency": self.latency_s, "ttft": self.ttft_s}
        return ",".join(f"{k}={_number(v)}" for k, v in parts.items() if v is not None)

    def as_dict(self) -> dict[str, Any]:
        """``{"ttft_s", "latency_s"}`` as printed with every goodput figure."""
        return {"ttft_s": self.ttft_s, "latency_s": self.latency_s}


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)


def parse_slo(text: str) -> Slo:
    """Read ``key=seconds[,key=seconds]``; raises :class:`SloError` with a clear message."""
    limits: dict[str, float] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, raw = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in SLO_KEYS:
            known = ", ".join(f"{k}=SECONDS" for k in SLO_KEYS)
            raise SloError(f"cannot read SLO part {part!r}: write {known}, comma-separated")
        if key in limits:
            raise SloError(f"SLO key {key!r} is given twice")
        try:
            value = float(raw)
        except ValueError:
            raise SloError(f"SLO {key}={raw.strip()!r} is not a number of seconds") from None
        if not math.isfinite(value) or value <= 0:
            raise SloError(f"SLO {key} must be a positive number of seconds, not {raw.strip()}")
        limits[key] = value
    if not limits:
        raise SloError("an SLO needs at least one limit, e.g. ttft=0.5,latency=10")
    return Slo(ttft_s=limits.get("ttft"), latency_s=limits.get("latency"))


def optional_slo(text: str | None) -> Slo | None:
    """``parse_slo`` of a setting that may be unset or empty (no SLO declared)."""
    if text is None or not text.strip():
        return None
    return parse_slo(text)
