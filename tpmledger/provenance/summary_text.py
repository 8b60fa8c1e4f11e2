"""The human block of a signed run summary (``SUMMARY.txt``, ``tpmledger summary show``).

One ``key: value`` a line with the predicate's own field names. The peak minutes, TTFT and
shard balance are indented blocks under their names; ``events``, ``minutes``, ``snapshot``
and ``generator`` are flattened with their name as prefix (``events_sha256``,
``minutes_merkle_root``, ``snapshot_seal``), as the docs/metrics.md run object names them. A
figure the data cannot support prints as ``not measured`` (docs/metrics.md honesty rule).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from tpmledger.provenance.in_toto_statement import PEAK_MINUTE_KEYS, PREDICATE_TYPE

FLATTENED = ("events", "minutes", "snapshot", "generator")
PEAK_KEYS = ("peak_minute", "peak_completion_minute")
NOT_MEASURED = "not measured"


def summary_text(predicate: Mapping[str, Any], key_fingerprint: str | None = None) -> str:
    """The human block for a run-summary predicate."""
    lines = [f"# tpmledger signed run summary ({PREDICATE_TYPE})"]
    for key, value in predicate.items():
        if key in FLATTENED and isinstance(value, Mapping):
            lines.extend(f"{key}_{sub}: {_scalar(v)}" for sub, v in value.items())
        elif isinstance(value, Mapping):
            if key in PEAK_KEYS:
                # Stored figures come back from JSONB with its own key order; use the documented
                # order.
                value = {k: value[k] for k in PEAK_MINUTE_KEYS if k in value} | dict(value)
            lines.append(f"{key}:" if value else f"{key}: {{}}")
            lines.extend(_block(value, "  "))
        else:
            lines.append(f"{key}: {_scalar(value)}")
    if key_fingerprint:
        lines.append(f"signing_key_sha256: {key_fingerprint}")
    lines.append("verify: tpmledger summary verify . --key service.pub")
    return "\n".join(lines) + "\n"


def summary_entries(text: str) -> list[tuple[tuple[str, ...], str]]:
    """The ``(path, value)`` pairs of a human block, in order: ``path`` is the key with the
    keys of the blocks it is indented under (``("peak_minute", "tpm_total")``). Two blocks
    say the same thing when their sorted entries are equal (the key order of a predicate
    read back from its signed, canonical JSON is not the order it was written in). A value
    that is a number is given in its shortest form (the canonical JSON signs 1.0 as 1)."""
    entries: list[tuple[tuple[str, ...], str]] = []
    parents: list[str] = []
    for line in text.splitlines():
        stripped = line.lstrip(" ")
        depth = (len(line) - len(stripped)) // 2
        key, colon, value = stripped.partition(":")
        if not colon or line.startswith("#"):
            entries.append(((), line))
            continue
        del parents[depth:]
        path = (*parents, key)
        if value:
            entries.append((path, _number_text(value.strip())))
        else:
            parents.append(key)
            entries.append((path, ""))
    return entries


def _number_text(value: str) -> str:
    try:
        number = Decimal(value)
    except InvalidOperation:
        return value
    if not number.is_finite():
        return value
    text = format(number.normalize(), "f")
    return "0" if text in ("-0", "0") else text


def _block(mapping: Mapping[str, Any], indent: str) -> list[str]:
    lines: list[str] = []
    for key, value in mapping.items():
        if isinstance(value, Mapping):
            lines.append(f"{indent}{key}:" if value else f"{indent}{key}: {{}}")
            lines.extend(_block(value, indent + "  "))
        else:
            lines.append(f"{indent}{key}: {_scalar(value)}")
    return lines


def _scalar(value: Any) -> str:
    if value is None:
        return NOT_MEASURED
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ", ".join(_scalar(v) for v in value)
    return str(value)
