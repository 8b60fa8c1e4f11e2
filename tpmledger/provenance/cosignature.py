"""Witness keys and ``cosignature/v1`` (c2sp.org/tlog-cosignature, Ed25519, type 0x04)
(docs/provenance.md#witnessing).

A cosignature is a signed-note signature line whose bytes are key ID ‖ u64 big-endian
timestamp ‖ Ed25519 signature over::

    cosignature/v1
    time <timestamp>
    <the checkpoint's note text>

Witness keys are stored as signed-note private key text
``PRIVATE+KEY+<name>+<hex key ID>+<base64(0x04 ‖ 32-byte seed)>``; the key ID is the one
of its verifier key ``<name>+<hex key ID>+<base64(0x04 ‖ public key)>``.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tpmledger.provenance.signed_note import (
    COSIGNATURE_V1,
    Note,
    NoteError,
    NoteSignature,
    VerifierKey,
    check_key_name,
    check_text,
    key_id,
    raw_public_key,
    raw_seed,
)

PRIVATE_KEY_PREFIX = "PRIVATE+KEY+"
MAX_TIMESTAMP = 2**63 - 1


@dataclass(frozen=True)
class WitnessKey:
    """A witness's name and Ed25519 private key."""

    name: str
    private_key: Ed25519PrivateKey

    @property
    def verifier(self) -> VerifierKey:
        return VerifierKey(self.name, COSIGNATURE_V1, raw_public_key(self.private_key.public_key()))

    @property
    def private_text(self) -> str:
        """``PRIVATE+KEY+<name>+<hex key ID>+<base64(0x04 ‖ seed)>``."""
        material = base64.b64encode(bytes([COSIGNATURE_V1]) + raw_seed(self.private_key)).decode()
        return f"{PRIVATE_KEY_PREFIX}{self.name}+{self.verifier.key_id.hex()}+{material}"


def generate_witness_key(name: str) -> WitnessKey:
    """A fresh witness key under ``name`` (a schema-less URL is recommended)."""
    return WitnessKey(check_key_name(name), Ed25519PrivateKey.generate())


def parse_witness_key(text: str) -> WitnessKey:
    """Parse witness private key text; the key ID must match the key it holds."""
    stripped = text.strip()
    if not stripped.startswith(PRIVATE_KEY_PREFIX):
        raise NoteError("not a witness private key (it must start with PRIVATE+KEY+)")
    parts = stripped[len(PRIVATE_KEY_PREFIX) :].split("+", 2)
    if len(parts) != 3:
        raise NoteError("witness private key is not PRIVATE+KEY+<name>+<key id>+<base64 seed>")
    name, hex_id, material = parts
    check_key_name(name)
    try:
        raw = base64.b64decode(material, validate=True)
    except (ValueError, binascii.Error) as exc:
        raise NoteError(f"witness private key of {name} is not base64: {exc}") from exc
    if len(raw) != 33 or raw[0] != COSIGNATURE_V1:
        raise NoteError(f"witness private key of {name} is not a 0x04 Ed25519 seed")
    key = WitnessKey(name, Ed25519PrivateKey.from_private_bytes(raw[1:]))
    if key.verifier.key_id.hex() != hex_id.lower() or len(hex_id) != 8:
        raise NoteError(f"witness private key of {name}: key id {hex_id} does not match its key")
    return key


def cosignature_message(timestamp: int, text: str) -> bytes:
    """The bytes a cosignature/v1 signs: header, time line, the checkpoint's note text."""
    if not 0 <= timestamp <= MAX_TIMESTAMP:
        raise NoteError(f"cosignature time {timestamp} is outside 0..2^63-1")
    return f"cosignature/v1\ntime {timestamp}\n".encode() + check_text(text).encode("utf-8")


def cosign(text: str, key: WitnessKey, timestamp: int) -> NoteSignature:
    """The witness's cosignature/v1 line over checkpoint note ``text`` at ``timestamp``."""
    signature = key.private_key.sign(cosignature_message(timestamp, text))
    verifier = key.verifier
    return NoteSignature(
        key.name,
        key_id(key.name, COSIGNATURE_V1, verifier.public_key),
        timestamp.to_bytes(8, "big") + signature,
    )


def cosignature_time(signature: NoteSignature) -> int:
    """The timestamp a cosignature line carries."""
    if len(signature.signature) != 8 + 64:
        raise NoteError(f"cosignature by {signature.name} is not 8 + 64 bytes")
    return int.from_bytes(signature.signature[:8], "big")


def verify_cosignature(note: Note, witness: VerifierKey) -> int:
    """The time of the witness's valid cosignature on ``note``; raise :class:`NoteError`
    when it has none or one that does not verify."""
    if witness.signature_type != COSIGNATURE_V1:
        raise NoteError(f"{witness.name} is not a witness key (type 0x04)")
    claimed = note.signatures_by(witness)
    if not claimed:
        raise NoteError(
            f"the checkpoint carries no cosignature by witness {witness.name}+"
            f"{witness.key_id.hex()}"
        )
    newest = 0
    for signature in claimed:
        timestamp = cosignature_time(signature)
        try:
            witness.ed25519.verify(
                signature.signature[8:], cosignature_message(timestamp, note.text)
            )
        except InvalidSignature as exc:
            raise NoteError(
                f"the cosignature by witness {witness.name} does not verify over this checkpoint"
            ) from exc
        newest = max(newest, timestamp)
    return newest
