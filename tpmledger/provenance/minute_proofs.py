"""Inclusion proofs that tie one minute's figures to the signed minute Merkle root
(docs/provenance.md).

A leaf is the JCS bytes of ``{minute_utc, calls_in_minute, prompt_tpm_in,
completion_tpm_out, tpm_total, failures, retries, events_sha256}``; hashing is RFC 6962
(``provenance.merkle``). ``minute-proofs.json`` holds every minute's leaf and audit path;
``summary prove`` writes one of them, with the signed envelope, as a standalone file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import rfc8785

from tpmledger.provenance.merkle import (
    all_inclusion_proofs,
    leaf_hash,
    root_from_leaf_hashes,
    verify_inclusion,
)

PROOFS_FORMAT = "tpmledger.minute-proofs.v1"
SINGLE_PROOF_FORMAT = "tpmledger.minute-proof.v1"
#: The figures of a minute leaf, in the minute table's column names: the one definition
#: the sealer (analytics/seal/minute_leaves.py) and the verifiers use.
LEAF_FIGURES: tuple[str, ...] = (
    "calls_in_minute",
    "prompt_tpm_in",
    "completion_tpm_out",
    "tpm_total",
    "failures",
    "retries",
)
#: Every key of a minute leaf: its minute, its figures and the digest of its event lines.
LEAF_KEYS = frozenset({"minute_utc", *LEAF_FIGURES, "events_sha256"})


class ProofError(ValueError):
    """A proof document is malformed or asks for a minute the tree does not hold."""


def leaf_bytes(leaf: Mapping[str, Any]) -> bytes:
    """The RFC 8785 bytes of one minute leaf (what the tree hashes)."""
    return rfc8785.dumps(dict(leaf))


def minute_leaf_hashes(leaves: Sequence[Mapping[str, Any]]) -> list[bytes]:
    """RFC 6962 leaf hashes of minute leaves (over each leaf's RFC 8785 bytes)."""
    return [leaf_hash(leaf_bytes(leaf)) for leaf in leaves]


def minute_tree_root(leaves: Sequence[Mapping[str, Any]]) -> tuple[str, int]:
    """``(merkle_root hex, tree_size)`` over minute leaves in minute order."""
    hashes = minute_leaf_hashes(leaves)
    return root_from_leaf_hashes(hashes).hex(), len(hashes)


def build_minute_proofs(run_id: str, leaves: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The ``minute-proofs.json`` document: every minute's leaf, leaf hash and audit path
    (all paths from one pass over the tree: O(n log n) in the minutes)."""
    hashes = minute_leaf_hashes(leaves)
    root, paths = all_inclusion_proofs(hashes)
    minutes = [
        {
            "index": i,
            "leaf": dict(leaf),
            "leaf_hash": hashes[i].hex(),
            "proof": [h.hex() for h in paths[i]],
        }
        for i, leaf in enumerate(leaves)
    ]
    return {
        "format": PROOFS_FORMAT,
        "run_id": run_id,
        "merkle_root": root.hex(),
        "tree_size": len(hashes),
        "minutes": minutes,
    }


def single_proof(
    proofs: Mapping[str, Any], minute_utc: str, envelope: Mapping[str, Any]
) -> dict[str, Any]:
    """One minute's proof, standalone: it carries the signed envelope with the root."""
    wanted = _minute(minute_utc)
    for entry in proofs["minutes"]:
        if _minute(entry["leaf"]["minute_utc"]) == wanted:
            return {
                "format": SINGLE_PROOF_FORMAT,
                "run_id": proofs["run_id"],
                "merkle_root": proofs["merkle_root"],
                "tree_size": proofs["tree_size"],
                **entry,
                "envelope": dict(envelope),
            }
    minutes = proofs["minutes"]
    if not minutes:
        raise ProofError(f"run {proofs['run_id']} has no minutes")
    raise ProofError(
        f"no minute {minute_utc} in run {proofs['run_id']} (minutes run from "
        f"{minutes[0]['leaf']['minute_utc']} to {minutes[-1]['leaf']['minute_utc']})"
    )


def _minute(text: str) -> datetime:
    """An RFC 3339 minute as an aware UTC datetime (``…Z`` and ``…+00:00`` compare equal)."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ProofError(f"{text!r} is not an RFC 3339 time like 2026-02-01T03:44:00Z") from exc
    return parsed.replace(tzinfo=parsed.tzinfo or UTC).astimezone(UTC)


def check_minute_proof(entry: Mapping[str, Any], merkle_root: str, tree_size: int) -> str | None:
    """``None`` if the entry's leaf is included under the signed root, else what broke."""
    try:
        leaf = entry["leaf"]
        index = entry["index"]
        path = [bytes.fromhex(h) for h in entry["proof"]]
        root = bytes.fromhex(merkle_root)
    except (KeyError, TypeError, ValueError) as exc:
        return f"malformed proof entry ({exc})"
    if type(index) is not int:  # not 3.9, not "3", not true
        return f"malformed proof entry (index {index!r} is not an integer)"
    if not isinstance(leaf, dict) or set(leaf) != LEAF_KEYS:
        return "leaf does not have exactly the minute-leaf fields"
    try:
        computed = leaf_hash(leaf_bytes(leaf))
    except (TypeError, ValueError) as exc:  # rfc8785 refuses NaN, huge ints, odd types
        return f"malformed proof entry (leaf cannot be canonicalized: {exc})"
    label = leaf.get("minute_utc")
    if entry.get("leaf_hash") not in (None, computed.hex()):
        return f"minute {label}: leaf_hash does not match the leaf's JCS hash"
    if not verify_inclusion(index, tree_size, computed, path, root):
        return f"minute {label}: inclusion proof does not lead to the signed Merkle root"
    return None
