"""Recompute a summary's figures and minute leaves from ``events.jsonl`` alone, and compare.

The verifier trusts nothing but the event file: it is parsed, re-serialised (to prove it
is canonical), and fed to the same analytics code that sealed the snapshot. Figures are
compared after a JSON round trip, since the signed predicate went through RFC 8785
(``5.0`` is published as ``5``); floats agree to a relative 1e-9.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from analytics.minute_leaves import leaves_from_minutes
from analytics.run_figures import analyze_events
from provenance.event_file import build_event_file, read_events

REL_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Recomputed:
    """What ``events.jsonl`` implies: run figures (§8 names), minute leaves, canonical form."""

    figures: dict[str, Any]
    leaves: list[dict[str, Any]]
    canonical: bool


def recompute_from_events(data: bytes) -> Recomputed:
    """Figures and minute leaves from the bytes of a canonical event file."""
    events = read_events(data)
    event_file = build_event_file(events)
    canonical = event_file.tobytes() == data
    # One analysis yields both the run figures and the minute table the leaves come from
    # (the same functions as compute_run_figures / minute_leaves, without computing twice).
    analysis = analyze_events(events)
    figures = _as_json(analysis.figures)
    leaves = [_as_json(leaf) for leaf in leaves_from_minutes(analysis.minutes, event_file)]
    return Recomputed(figures, leaves, canonical)


def figure_mismatches(signed: Any, recomputed: Any, path: str = "") -> list[str]:
    """Every path where the recomputed value differs, as ``path: signed X, recomputed Y``."""
    if isinstance(signed, Mapping) and isinstance(recomputed, Mapping):
        out: list[str] = []
        for key in sorted(set(signed) | set(recomputed)):
            sub = f"{path}.{key}" if path else str(key)
            if key not in signed or key not in recomputed:
                out.append(f"{sub}: present on one side only")
            else:
                out.extend(figure_mismatches(signed[key], recomputed[key], sub))
        return out
    if isinstance(signed, list) and isinstance(recomputed, list) and len(signed) == len(recomputed):
        return [
            m
            for i, (a, b) in enumerate(zip(signed, recomputed, strict=True))
            for m in figure_mismatches(a, b, f"{path}[{i}]")
        ]
    if _numbers_agree(signed, recomputed) or signed == recomputed:
        return []
    return [f"{path}: signed {signed!r}, recomputed {recomputed!r}"]


def _numbers_agree(a: Any, b: Any) -> bool:
    numeric = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if not (isinstance(a, numeric) and isinstance(b, numeric)):
        return False
    return math.isclose(a, b, rel_tol=REL_TOLERANCE, abs_tol=1e-12)


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))
