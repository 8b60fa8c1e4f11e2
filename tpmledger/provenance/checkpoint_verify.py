"""The ``checkpoint`` of an export directory, checked offline (docs/provenance.md#witnessing).

- ``checkpoint`` — the file is a C2SP checkpoint signed by the trusted key (key name =
  its origin, which must name the summary's run) over the same tree size and root as the
  signed summary;
- ``cosignature`` — with a witness verifier key, a valid ``cosignature/v1`` by that
  witness on it.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any
from urllib.parse import quote

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from tpmledger.provenance.checkpoint import RUNS_PATH, open_checkpoint
from tpmledger.provenance.cosignature import verify_cosignature
from tpmledger.provenance.signed_note import (
    ED25519,
    NoteError,
    VerifierKey,
    parse_note,
    raw_public_key,
)

CHECKPOINT_FILE = "checkpoint"


def checkpoint_checks(
    directory: Path,
    predicate: dict[str, Any],
    key: Ed25519PublicKey,
    witness: VerifierKey | None,
) -> list[tuple[str, bool, str]]:
    """``(name, ok, detail)`` of each check; none when the export has no checkpoint and no
    witness is asked for (exports made before checkpoints existed)."""
    path = directory / CHECKPOINT_FILE
    if not path.is_file():
        if witness is None:
            return []
        return [("checkpoint", False, f"{path} is missing: nothing for the witness to cosign")]
    data = path.read_bytes()
    try:
        note = parse_note(data)
        origin = note.text.split("\n", 1)[0]
        checkpoint, note = open_checkpoint(data, VerifierKey(origin, ED25519, raw_public_key(key)))
    except NoteError as exc:
        return [("checkpoint", False, f"{path}: {exc}")]
    run_id = str(predicate.get("run_id"))
    signed = predicate.get("minutes", {})
    root = signed.get("merkle_root")
    checks: list[tuple[str, bool, str]] = []
    if not checkpoint.origin.endswith(RUNS_PATH + quote(run_id, safe="")):
        checks.append(
            ("checkpoint", False, f"origin {checkpoint.origin} does not name run {run_id}")
        )
    elif (checkpoint.tree_size, checkpoint.root_hash.hex()) != (signed.get("tree_size"), root):
        checks.append(
            (
                "checkpoint",
                False,
                f"checkpoint size {checkpoint.tree_size} root {checkpoint.root_hash.hex()} is "
                f"not the signed summary's size {signed.get('tree_size')} root {root}",
            )
        )
    else:
        checks.append(
            (
                "checkpoint",
                True,
                f"{checkpoint.origin} size {checkpoint.tree_size} root "
                f"{base64.b64encode(checkpoint.root_hash).decode()} signed by the same key",
            )
        )
    if witness is not None:
        try:
            timestamp = verify_cosignature(note, witness)
        except NoteError as exc:
            checks.append(("cosignature", False, str(exc)))
        else:
            checks.append(
                (
                    "cosignature",
                    True,
                    f"witness {witness.name}+{witness.key_id.hex()} cosigned it at {timestamp} "
                    "(POSIX time)",
                )
            )
    return checks
