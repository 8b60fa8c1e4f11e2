"""Checkpoints (c2sp.org/tlog-checkpoint): a run's minute tree head as a signed note
(docs/provenance.md#checkpoints).

Note text, three lines: the origin ``<log origin>/tpmledger/runs/<run_id percent-encoded>``,
the tree size (minutes) in decimal, the base64 RFC 6962 root. The log signs with its
Ed25519 summary key as a signed-note type 0x01 signature whose key name is the origin.
"""

from __future__ import annotations

import base64
import binascii
import socket
from dataclasses import dataclass
from urllib.parse import quote

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from tpmledger.provenance.signed_note import (
    ED25519,
    Note,
    NoteError,
    VerifierKey,
    ed25519_verifier_key,
    parse_note,
    sign_note,
    verify_ed25519,
)

RUNS_PATH = "/tpmledger/runs/"


def default_log_origin() -> str:
    """The log origin prefix when ``TPMLEDGER_LOG_ORIGIN`` is unset: this host's name."""
    return socket.gethostname() or "localhost"


def run_origin(log_origin: str, run_id: str) -> str:
    """``<log origin>/tpmledger/runs/<run_id percent-encoded>`` (no spaces, no '+')."""
    prefix = log_origin.strip().rstrip("/")
    if not prefix or "+" in prefix or any(c.isspace() for c in prefix):
        raise NoteError(f"log origin {log_origin!r} must be non-empty without spaces or '+'")
    return f"{prefix}{RUNS_PATH}{quote(run_id, safe='')}"


@dataclass(frozen=True)
class Checkpoint:
    """A tree head: origin, size and 32-byte root hash."""

    origin: str
    tree_size: int
    root_hash: bytes

    @property
    def text(self) -> str:
        """The note text (three lines, each ending in a newline)."""
        root = base64.b64encode(self.root_hash).decode()
        return f"{self.origin}\n{self.tree_size}\n{root}\n"

    def describe(self) -> str:
        return f"size {self.tree_size}, root {base64.b64encode(self.root_hash).decode()}"


def parse_checkpoint_text(text: str) -> Checkpoint:
    """Parse a checkpoint's note text (extension lines are refused: tpmledger writes none)."""
    lines = text.split("\n")
    if len(lines) < 4 or lines[-1] != "":
        raise NoteError("a checkpoint has an origin, a tree size and a root hash line")
    origin, size_text, root_text = lines[0], lines[1], lines[2]
    if len(lines) > 4:
        raise NoteError("checkpoint extension lines are not accepted")
    if not origin:
        raise NoteError("checkpoint origin line is empty")
    if (
        not size_text.isascii()
        or not size_text.isdigit()
        or (size_text != "0" and size_text.startswith("0"))
    ):
        raise NoteError(
            f"checkpoint tree size {size_text!r} is not a decimal without leading zeros"
        )
    try:
        root = base64.b64decode(root_text, validate=True)
    except (ValueError, binascii.Error) as exc:
        raise NoteError(f"checkpoint root hash {root_text!r} is not base64") from exc
    if len(root) != 32:
        raise NoteError(f"checkpoint root hash is {len(root)} bytes, not 32")
    return Checkpoint(origin, int(size_text), root)


def sign_checkpoint(checkpoint: Checkpoint, private_key: Ed25519PrivateKey) -> str:
    """The signed checkpoint: note text and the log's Ed25519 signature (key name = origin)."""
    return sign_note(checkpoint.text, checkpoint.origin, private_key)


def log_verifier_key(origin: str, public_key: Ed25519PublicKey) -> str:
    """The verifier key text of the log key for ``origin``."""
    return ed25519_verifier_key(origin, public_key, ED25519)


def open_checkpoint(data: bytes | str, log_key: VerifierKey) -> tuple[Checkpoint, Note]:
    """Parse a signed checkpoint and check the log's signature; its origin must be the key's
    name."""
    note = parse_note(data)
    checkpoint = parse_checkpoint_text(note.text)
    if checkpoint.origin != log_key.name:
        raise NoteError(
            f"checkpoint origin {checkpoint.origin} is not the log key's name {log_key.name}"
        )
    verify_ed25519(note, log_key)
    return checkpoint, note
