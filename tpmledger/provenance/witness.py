"""A witness (c2sp.org/tlog-witness semantics, run as a command): cosign a checkpoint only
if it is consistent with everything this witness cosigned for its origin
(docs/provenance.md#witnessing).

Per origin the state directory keeps the size and root of the last checkpoint cosigned.
A new checkpoint is cosigned when the log's signature verifies and either the witness
has no state for the origin, the size and root are the same, or an RFC 9162 consistency
proof from the stored size to the new one — computed from the log's tiles alone —
verifies against both roots. Otherwise it is refused with both tree heads named: a
smaller tree, a different root at the same size (a fork) or a tree that does not extend
the old one (history rewritten, e.g. a rebase after late data). Check and update happen
under a lock, so two cosigns of one origin cannot roll the state back.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tpmledger.provenance.checkpoint import Checkpoint, open_checkpoint
from tpmledger.provenance.cosignature import WitnessKey, cosign
from tpmledger.provenance.merkle import verify_consistency
from tpmledger.provenance.signed_note import VerifierKey
from tpmledger.provenance.tile_proofs import TiledTree, TileReader
from tpmledger.provenance.tiles import TileError


class WitnessRefusal(Exception):
    """The checkpoint is not consistent with what this witness cosigned before."""


@dataclass(frozen=True)
class Cosigned:
    """The checkpoint with the witness's cosignature appended, and what it replaced."""

    note: str
    checkpoint: Checkpoint
    previous: Checkpoint | None
    timestamp: int


def _state_file(state_dir: Path, origin: str) -> Path:
    return state_dir / f"{hashlib.sha256(origin.encode()).hexdigest()[:32]}.json"


def read_state(state_dir: Path, origin: str) -> Checkpoint | None:
    """The last tree head cosigned for ``origin``, or None."""
    path = _state_file(state_dir, origin)
    if not path.exists():
        return None
    document = json.loads(path.read_text())
    if document.get("origin") != origin:
        raise WitnessRefusal(f"witness state {path} belongs to {document.get('origin')!r}")
    return Checkpoint(origin, int(document["tree_size"]), base64.b64decode(document["root_hash"]))


def _write_state(state_dir: Path, checkpoint: Checkpoint, timestamp: int) -> None:
    document = {
        "origin": checkpoint.origin,
        "tree_size": checkpoint.tree_size,
        "root_hash": base64.b64encode(checkpoint.root_hash).decode(),
        "cosigned_at": timestamp,
    }
    fd, name = tempfile.mkstemp(dir=state_dir, prefix=".state-")
    with os.fdopen(fd, "w") as handle:
        json.dump(document, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(name, _state_file(state_dir, checkpoint.origin))


@contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def check_not_behind(old: Checkpoint, new: Checkpoint) -> None:
    """Refuse a smaller tree, or another root at the same size (needs no tiles)."""
    said = f"checkpoint {new.origin} {new.describe()}"
    before = f"the {old.describe()} this witness cosigned"
    if new.tree_size < old.tree_size:
        raise WitnessRefusal(f"{said} is smaller than {before}")
    if new.tree_size == old.tree_size and new.root_hash != old.root_hash:
        raise WitnessRefusal(f"{said} forks from {before}: same size, different root")


def check_consistent(old: Checkpoint, new: Checkpoint, tiles: TileReader) -> None:
    """Raise :class:`WitnessRefusal` unless ``new`` extends ``old`` (proof from the tiles)."""
    check_not_behind(old, new)
    if new.tree_size == old.tree_size or old.tree_size == 0:
        return
    try:
        proof = TiledTree(tiles, new.tree_size).consistency_proof(old.tree_size)
    except TileError as exc:
        raise TileError(f"cannot compute a consistency proof from the tiles: {exc}") from exc
    if not verify_consistency(old.tree_size, new.tree_size, old.root_hash, new.root_hash, proof):
        raise WitnessRefusal(
            f"checkpoint {new.origin} {new.describe()} is not consistent with the "
            f"{old.describe()} this witness cosigned: the log's tiles give no proof that it "
            "extends the old tree (history was rewritten: a rebase after late data, or a fork)"
        )


def _check_served(checkpoint: Checkpoint, tiles: TileReader) -> None:
    """The tiles must hold the checkpoint's tree: the proofs are computed from them."""
    try:
        served_root = TiledTree(tiles, checkpoint.tree_size).root()
    except TileError as exc:
        raise TileError(f"cannot read the tree of the checkpoint from the tiles: {exc}") from exc
    if served_root != checkpoint.root_hash:
        raise WitnessRefusal(
            f"the tiles do not hold checkpoint {checkpoint.origin} {checkpoint.describe()}: "
            f"they give root {base64.b64encode(served_root).decode()} at that size"
        )


def cosign_checkpoint(
    data: bytes | str,
    log_key: VerifierKey,
    witness_key: WitnessKey,
    state_dir: Path,
    tiles: TileReader,
    now: int | None = None,
) -> Cosigned:
    """Verify, check against the state, cosign and record; raise ``NoteError`` (bad input),
    ``TileError`` (tiles unreadable) or :class:`WitnessRefusal`."""
    checkpoint, note = open_checkpoint(data, log_key)
    timestamp = int(time.time()) if now is None else now
    with _locked(state_dir):
        previous = read_state(state_dir, checkpoint.origin)
        if previous is not None:
            check_not_behind(previous, checkpoint)
        if previous is None or previous.tree_size < checkpoint.tree_size:
            _check_served(checkpoint, tiles)
            if previous is not None:
                check_consistent(previous, checkpoint, tiles)
        signature = cosign(note.text, witness_key, timestamp)
        _write_state(state_dir, checkpoint, timestamp)
    return Cosigned(note.with_signature(signature).encode(), checkpoint, previous, timestamp)
