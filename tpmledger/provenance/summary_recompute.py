"""Recompute a summary's figures, minute leaves and Merkle root from ``events.jsonl`` alone.

The verifier trusts nothing but the event file, and none of the code that sealed it: the
file is read and checked for canonical form, and every figure, leaf and the tree head
are recomputed by :mod:`provenance.reference` (standard library only), in one pass over
the file a piece at a time (memory follows the run's calls, not the file). Figures are
compared after a JSON round trip, since the signed predicate went through RFC 8785
(``5.0`` is published as ``5``); floats agree to a relative 1e-9 (the sealer rounds them
to 12 significant digits and sums in another order).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from tpmledger.provenance.reference.event_lines import CanonicalCheck
from tpmledger.provenance.reference.event_rows import read_rows
from tpmledger.provenance.reference.jcs_text import object_bytes
from tpmledger.provenance.reference.rfc6962 import leaf_hash, tree_head
from tpmledger.provenance.reference.run_tally import RunTally

REL_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Recomputed:
    """What ``events.jsonl`` implies: run figures (docs/metrics.md names), minute leaves,
    the minute tree head, and whether the file is canonical (else why not)."""

    figures: dict[str, Any]
    leaves: list[dict[str, Any]]
    merkle_root: str
    canonical_problem: str | None

    @property
    def canonical(self) -> bool:
        return self.canonical_problem is None

    @property
    def tree_size(self) -> int:
        return len(self.leaves)


def recompute_from_events(data: bytes) -> Recomputed:
    """Figures, minute leaves and Merkle root from the bytes of an event file.

    Raises :class:`~provenance.reference.event_lines.EventFileError` (a ``ValueError``)
    when a line is not an event of the format at all.
    """
    return recompute_from_blocks([data])


def recompute_from_blocks(blocks: Iterable[bytes]) -> Recomputed:
    """:func:`recompute_from_events` of the file whose bytes are ``blocks`` one after another
    (of any sizes: a file read a block at a time)."""
    check = CanonicalCheck()
    tally = RunTally()
    for rows in read_rows(blocks, check):
        tally.add_rows(rows)
    leaves = tally.leaves()
    root = tree_head([leaf_hash(object_bytes(leaf)) for leaf in leaves]).hex()
    return Recomputed(_as_json(tally.figures()), leaves, root, check.problem)


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
    return json.loads(json.dumps(value))
