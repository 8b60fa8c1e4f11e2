"""The consistency-proof document between two versions of a run, checked offline.

``{"run_id", "from": {"version", "tree_size", "merkle_root"}, "to": {...}, "proof":
[hex, …]}`` (docs/provenance.md#consistency-proofs): the minute tree of version ``to``
extends the tree of version ``from``.

The proof arithmetic (RFC 9162 §2.1.4.2) alone cannot bind what the document *claims*:
the same proof verifies a 4-leaf tree against a 7- or an 8-leaf tree with the same root,
and the run id and versions are plain labels. So every field the proof relies on is
checked against a signed statement: :func:`signed_tree_head` verifies the DSSE signature
before anything is read from the payload, and :func:`check_against_signed` requires the
run id, the version, the tree size and the root to be exactly the signed ones. Every
field is parsed strictly (sizes and versions are JSON integers — not ``3.9``, not
``true`` — within range), and malformed input is refused with one line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tpmledger.provenance.dsse import EnvelopeError, verify_envelope
from tpmledger.provenance.in_toto_statement import StatementError, parse_statement
from tpmledger.provenance.merkle import verify_consistency

#: Sizes and versions beyond a signed 64-bit integer are not ours: refuse them.
MAX_INTEGER = 2**63 - 1
#: A consistency proof between trees under 2**63 leaves has fewer nodes than this.
MAX_PROOF_NODES = 2 * 64
_HEX_DIGEST = re.compile(r"[0-9a-f]{64}")


class ConsistencyDocumentError(ValueError):
    """The document, or the signed summary it is checked against, is malformed."""


@dataclass(frozen=True)
class TreeHead:
    """One version's minute tree as a document claims or a statement signs it."""

    version: int
    tree_size: int
    merkle_root: str  # 64 lowercase hex digits


@dataclass(frozen=True)
class ConsistencyClaim:
    """A parsed document: what it claims, and the proof nodes."""

    run_id: str
    old: TreeHead
    new: TreeHead
    proof: tuple[bytes, ...]

    def head(self, side: str) -> TreeHead:
        return self.old if side == "from" else self.new


@dataclass(frozen=True)
class SignedTreeHead:
    """The run id and tree head of a signed summary whose signature verified."""

    run_id: str
    head: TreeHead
    key_fingerprint: str


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


def parse_document(document: object) -> ConsistencyClaim:
    """The claim of a consistency-proof document, every field checked for type and range."""
    if not isinstance(document, dict):
        raise ConsistencyDocumentError(
            f"the document is a JSON {_json_kind(document)}, not an object"
        )
    run_id = document.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        raise ConsistencyDocumentError("run_id is missing or not a non-empty string")
    old = _tree_head(document.get("from"), "from")
    new = _tree_head(document.get("to"), "to")
    if old.version >= new.version:
        raise ConsistencyDocumentError(
            f"from.version ({old.version}) must be an earlier version than to.version "
            f"({new.version})"
        )
    nodes = document.get("proof")
    if not isinstance(nodes, list) or len(nodes) > MAX_PROOF_NODES:
        raise ConsistencyDocumentError(
            f"proof is not a list of at most {MAX_PROOF_NODES} hex hashes"
        )
    if not all(isinstance(node, str) and _HEX_DIGEST.fullmatch(node) for node in nodes):
        raise ConsistencyDocumentError("a proof node is not 64 lowercase hex digits")
    return ConsistencyClaim(run_id, old, new, tuple(bytes.fromhex(node) for node in nodes))


def proof_problem(claim: ConsistencyClaim) -> str | None:
    """``None`` when the proof verifies for the claimed sizes and roots (RFC 9162 §2.1.4.2)."""
    old, new = claim.old, claim.new
    if verify_consistency(
        old.tree_size,
        new.tree_size,
        bytes.fromhex(old.merkle_root),
        bytes.fromhex(new.merkle_root),
        claim.proof,
    ):
        return None
    return (
        f"the proof does not show that the tree of version {new.version} "
        f"({new.tree_size} minutes) extends the tree of version {old.version} "
        f"({old.tree_size} minutes)"
    )


def check_consistency(document: object) -> str | None:
    """``None`` when the document is well formed and its proof verifies for the sizes and
    roots it claims, else what is wrong. Says nothing about whether those are signed."""
    try:
        claim = parse_document(document)
    except ConsistencyDocumentError as exc:
        return f"malformed consistency-proof document: {exc}"
    return proof_problem(claim)


def signed_tree_head(envelope: object, trusted_keys: Sequence[Ed25519PublicKey]) -> SignedTreeHead:
    """Verify the envelope's signature, then read the run id and minute tree it signs.

    Nothing is read from the payload before some signature verifies with a trusted key.
    Raises :class:`ConsistencyDocumentError` (or its causes) with one line.
    """
    try:
        verified = verify_envelope(envelope, trusted_keys)  # type: ignore[arg-type]
    except EnvelopeError as exc:
        raise ConsistencyDocumentError(f"signature: {exc}") from exc
    try:
        predicate = parse_statement(verified.payload)["predicate"]
    except StatementError as exc:
        raise ConsistencyDocumentError(f"statement: {exc}") from exc
    run_id = predicate.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        raise ConsistencyDocumentError("the signed predicate has no run_id")
    snapshot = predicate.get("snapshot")
    minutes = predicate["minutes"]
    head = _tree_head(
        {
            "version": snapshot.get("version") if isinstance(snapshot, dict) else None,
            "tree_size": minutes.get("tree_size"),
            "merkle_root": minutes.get("merkle_root"),
        },
        "signed",
    )
    return SignedTreeHead(run_id, head, verified.key_fingerprint)


def check_against_signed(claim: ConsistencyClaim, side: str, signed: SignedTreeHead) -> str | None:
    """``None`` when the ``side`` ("from"/"to") of the claim is exactly the signed one:
    same run id, version, tree size and root; else every field that differs."""
    mine = claim.head(side)
    differences = [
        f"{name} {claimed!r} (signed: {actual!r})"
        for name, claimed, actual in (
            ("run_id", claim.run_id, signed.run_id),
            ("version", mine.version, signed.head.version),
            ("tree_size", mine.tree_size, signed.head.tree_size),
            ("merkle_root", mine.merkle_root, signed.head.merkle_root),
        )
        if claimed != actual
    ]
    if differences:
        return f"the {side!r} side is not the signed summary's: " + ", ".join(differences)
    return None


def _tree_head(value: object, side: str) -> TreeHead:
    if not isinstance(value, dict):
        raise ConsistencyDocumentError(f"{side!r} is missing or not an object")
    version = _positive_integer(value.get("version"), f"{side}.version")
    tree_size = _positive_integer(value.get("tree_size"), f"{side}.tree_size")
    root = value.get("merkle_root")
    if not isinstance(root, str) or not _HEX_DIGEST.fullmatch(root):
        raise ConsistencyDocumentError(f"{side}.merkle_root is not 64 lowercase hex digits")
    return TreeHead(version, tree_size, root)


def _positive_integer(value: object, name: str) -> int:
    # bool is an int subclass in Python: `true` must not pass for 1.
    if type(value) is not int:
        raise ConsistencyDocumentError(f"{name} is {_shown(value)}, not an integer")
    if not 1 <= value <= MAX_INTEGER:
        raise ConsistencyDocumentError(f"{name} is {_shown(value)}, not in 1..{MAX_INTEGER}")
    return value


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _json_kind(value: object) -> str:
    kinds = {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)
