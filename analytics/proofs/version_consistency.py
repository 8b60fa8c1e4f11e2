"""Consistency proofs between two sealed versions of a run (docs/provenance.md#consistency).

Leaves are minutes in order, so a later version's minute tree extends an earlier one's
unless a minute the earlier version held changed (late data) or an earlier minute
appeared. :func:`prove_consistency` reads both versions' stored leaf hashes, refuses with
the changed minutes named when the later tree is not an extension, and otherwise returns
the RFC 9162 §2.1.4 proof in the published JSON shape
(:mod:`provenance.consistency_document`, which also checks one offline).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from tpmledger.analytics.seal.minute_log import changed_minutes, first_minute, leaf_list
from tpmledger.provenance.consistency_document import check_consistency, consistency_document
from tpmledger.provenance.merkle import consistency_proof, root_from_leaf_hashes
from tpmledger.storage.codecs.time_text import minute_text
from tpmledger.storage.readers.snapshots_read import snapshot_at

MAX_VERSION = 2**31 - 1


class ConsistencyRefused(ValueError):
    """No consistency proof exists (or can be built) between the two versions."""


class VersionNotFound(ConsistencyRefused):
    """The run has no such sealed version."""


def _leaves(blob: bytes | None, version: int, run_id: str) -> list[bytes]:
    if blob is None:
        raise ConsistencyRefused(
            f"version {version} of {run_id} was sealed before leaf hashes were stored; "
            "seal the run again (tpmledger analyze --force) and prove between newer versions"
        )
    return leaf_list(blob)


def prove_consistency(session: Session, run_id: str, old: int, new: int) -> dict[str, Any]:
    """The proof that version ``new``'s minute tree extends version ``old``'s, from the
    versions ``session`` (a :func:`storage.server.database.read_view`) sees."""
    for version in (old, new):
        if not 1 <= version <= MAX_VERSION:  # versions are PostgreSQL integers from 1
            raise VersionNotFound(f"run {run_id!r} has no sealed version {version}")
    if old >= new:
        raise ConsistencyRefused(f"--from ({old}) must be an earlier version than --to ({new})")
    snapshots = {v: snapshot_at(session, run_id, v) for v in (old, new)}
    for version, snapshot in snapshots.items():
        if snapshot is None:
            raise VersionNotFound(f"run {run_id!r} has no sealed version {version}")
    a, b = snapshots[old], snapshots[new]
    assert a is not None and b is not None
    old_leaves = _leaves(a.leaf_hashes, old, run_id)
    new_leaves = _leaves(b.leaf_hashes, new, run_id)
    first_old, first_new = first_minute(a.metrics), first_minute(b.metrics)
    changed = changed_minutes(old_leaves, first_old, new_leaves, first_new)
    if changed:
        minutes = ", ".join(minute_text(m) for m in changed)
        raise ConsistencyRefused(
            f"minutes changed between version {old} and version {new} (late data): {minutes}; "
            f"version {new} does not extend version {old}"
        )
    if len(new_leaves) < len(old_leaves):
        raise ConsistencyRefused(
            f"version {new} holds {len(new_leaves)} minutes, fewer than version {old}'s "
            f"{len(old_leaves)}"
        )
    if not old_leaves:
        raise ConsistencyRefused(f"version {old} has no minutes to prove a prefix of")
    document = consistency_document(
        run_id,
        {"version": old, "tree_size": a.tree_size, "merkle_root": a.merkle_root},
        {"version": new, "tree_size": b.tree_size, "merkle_root": b.merkle_root},
        consistency_proof(new_leaves, len(old_leaves)),
    )
    # The stored roots must be the trees of the stored leaves, and the proof must verify.
    if root_from_leaf_hashes(old_leaves).hex() != a.merkle_root or check_consistency(document):
        raise ConsistencyRefused("the stored leaves do not match the sealed Merkle roots")
    return document
