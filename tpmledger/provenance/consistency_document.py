"""The consistency-proof document between two versions of a run, checked offline.

``{"run_id", "from": {"version", "tree_size", "merkle_root"}, "to": {...}, "proof":
[hex, …]}`` (docs/provenance.md#consistency-proofs): the minute tree of version ``to``
extends the tree of version ``from``. Checking needs nothing but this document (and, to
tie the roots to signed figures, the two signed summaries).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tpmledger.provenance.merkle import verify_consistency


def consistency_document(
    run_id: str, old: Mapping[str, Any], new: Mapping[str, Any], proof: list[bytes]
) -> dict[str, Any]:
    """The published document; ``old``/``new`` hold version, tree_size, merkle_root."""
    keys = ("version", "tree_size", "merkle_root")
    return {
        "run_id": run_id,
        "from": {k: old[k] for k in keys},
        "to": {k: new[k] for k in keys},
        "proof": [node.hex() for node in proof],
    }


def check_consistency(document: Mapping[str, Any]) -> str | None:
    """``None`` when the proof verifies (RFC 9162 §2.1.4.2), else what is wrong."""
    try:
        old, new = document["from"], document["to"]
        sizes = int(old["tree_size"]), int(new["tree_size"])
        roots = bytes.fromhex(old["merkle_root"]), bytes.fromhex(new["merkle_root"])
        proof = [bytes.fromhex(node) for node in document["proof"]]
    except (KeyError, TypeError, ValueError) as exc:
        return f"malformed consistency-proof document ({exc})"
    if not verify_consistency(*sizes, *roots, proof):
        return (
            f"the proof does not show that the tree of version {new.get('version')} "
            f"({sizes[1]} minutes) extends the tree of version {old.get('version')} "
            f"({sizes[0]} minutes)"
        )
    return None


def check_against_summary(
    document: Mapping[str, Any], side: str, predicate: Mapping[str, Any]
) -> str | None:
    """``None`` when the ``side`` ("from"/"to") root and size are the signed summary's."""
    signed = predicate.get("minutes") or {}
    version = (predicate.get("snapshot") or {}).get("version")
    mine = document[side]
    if (signed.get("merkle_root"), signed.get("tree_size")) != (
        mine["merkle_root"],
        mine["tree_size"],
    ):
        return f"the {side!r} root and size are not those of the signed summary (v{version})"
    return None
