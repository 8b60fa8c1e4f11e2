"""C2SP signed notes (c2sp.org/signed-note, Go's golang.org/x/mod/sumdb/note): text, a blank
line, then one ``— <key name> base64(key ID ‖ signature)`` line per signature
(docs/provenance.md#checkpoints).

- key ID = the first four bytes of SHA-256(key name ‖ 0x0A ‖ signature type ‖ public key);
- verifier key text = ``<name>+<8 hex digits of the key ID>+<base64(type ‖ public key)>``;
- private key text = ``PRIVATE+KEY+<name>+<hex key ID>+<base64(type ‖ private seed)>``;
- signature type 0x01 = Ed25519 over the note text (the log's signature), 0x04 =
  timestamped Ed25519 cosignatures (:mod:`provenance.cosignature`).

Verifiers ignore signatures whose (name, key ID) they do not know, and a known key's
signature must verify.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

ED25519 = 0x01
COSIGNATURE_V1 = 0x04
SIGNATURE_PREFIX = "— "  # em dash, space
#: Go's note.Open refuses notes with more signatures than this; so do we.
MAX_SIGNATURES = 100


class NoteError(ValueError):
    """A note, key text or signature is malformed, or no trusted signature verifies."""


def key_id(name: str, signature_type: int, public_key: bytes) -> bytes:
    """SHA-256(name ‖ "\\n" ‖ type ‖ public key)[:4] (the signed-note key ID)."""
    return hashlib.sha256(name.encode() + b"\n" + bytes([signature_type]) + public_key).digest()[:4]


def check_key_name(name: str) -> str:
    """A key name: non-empty, no Unicode spaces, no plus sign."""
    if not name or "+" in name or any(c.isspace() for c in name):
        raise NoteError(f"key name {name!r} must be non-empty without spaces or '+'")
    return name


@dataclass(frozen=True)
class VerifierKey:
    """A trusted public key: name, signature type and raw key bytes."""

    name: str
    signature_type: int
    public_key: bytes

    @property
    def key_id(self) -> bytes:
        return key_id(self.name, self.signature_type, self.public_key)

    @property
    def text(self) -> str:
        """``<name>+<hex key ID>+<base64(type ‖ public key)>``."""
        material = base64.b64encode(bytes([self.signature_type]) + self.public_key).decode()
        return f"{self.name}+{self.key_id.hex()}+{material}"

    @property
    def ed25519(self) -> Ed25519PublicKey:
        return Ed25519PublicKey.from_public_bytes(self.public_key)


def raw_public_key(key: Ed25519PublicKey) -> bytes:
    """The 32 bytes of an Ed25519 public key (RFC 8032 encoding)."""
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def raw_seed(key: Ed25519PrivateKey) -> bytes:
    """The 32-byte seed of an Ed25519 private key."""
    return key.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )


def ed25519_verifier_key(name: str, key: Ed25519PublicKey, signature_type: int = ED25519) -> str:
    """The verifier key text of an Ed25519 public key under ``name``."""
    return VerifierKey(check_key_name(name), signature_type, raw_public_key(key)).text


def parse_verifier_key(text: str, signature_type: int | None = None) -> VerifierKey:
    """Parse ``<name>+<hex key ID>+<base64(type ‖ key)>``; the key ID must match the key."""
    parts = text.strip().split("+", 2)  # base64 may hold "+"
    if len(parts) != 3:
        raise NoteError(f"verifier key {text.strip()!r} is not <name>+<key id>+<base64 key>")
    name, hex_id, material = parts
    check_key_name(name)
    try:
        if len(hex_id) != 8:
            raise ValueError("key id is not 8 hex digits")
        wanted_id = bytes.fromhex(hex_id)
        raw = base64.b64decode(material, validate=True)
    except (ValueError, binascii.Error) as exc:
        raise NoteError(f"verifier key {text.strip()!r} is malformed: {exc}") from exc
    if len(raw) != 33 or raw[0] not in (ED25519, COSIGNATURE_V1):
        raise NoteError(f"verifier key {text.strip()!r} is not an Ed25519 key (type 0x01 or 0x04)")
    key = VerifierKey(name, raw[0], raw[1:])
    if key.key_id != wanted_id:
        raise NoteError(f"verifier key {text.strip()!r}: key id does not match its key")
    if signature_type is not None and key.signature_type != signature_type:
        raise NoteError(
            f"verifier key {name} has signature type 0x{key.signature_type:02x}, "
            f"expected 0x{signature_type:02x}"
        )
    return key


@dataclass(frozen=True)
class NoteSignature:
    """One signature line: key name, key ID and the signature bytes after the ID."""

    name: str
    key_id: bytes
    signature: bytes

    @property
    def line(self) -> str:
        encoded = base64.b64encode(self.key_id + self.signature).decode()
        return f"{SIGNATURE_PREFIX}{self.name} {encoded}\n"


@dataclass(frozen=True)
class Note:
    """A note's text (ending in a newline) and its signatures, in order."""

    text: str
    signatures: tuple[NoteSignature, ...]

    def encode(self) -> str:
        """The signed-note form: text, blank line, signature lines."""
        return self.text + "\n" + "".join(s.line for s in self.signatures)

    def with_signature(self, signature: NoteSignature) -> Note:
        """This note with ``signature`` added (replacing one of the same name and key ID)."""
        kept = tuple(
            s for s in self.signatures if (s.name, s.key_id) != (signature.name, signature.key_id)
        )
        return Note(self.text, (*kept, signature))

    def signatures_by(self, key: VerifierKey) -> list[NoteSignature]:
        """The signatures that claim to be by ``key`` (same name and key ID)."""
        return [s for s in self.signatures if (s.name, s.key_id) == (key.name, key.key_id)]


def check_text(text: str) -> str:
    """Note text: ends in a newline, no control characters but newlines, no blank line last."""
    if not text.endswith("\n") or text.endswith("\n\n") or text == "\n":
        raise NoteError("note text must be non-empty lines, each ending in a newline")
    if any(ord(c) < 0x20 and c != "\n" for c in text):
        raise NoteError("note text holds a control character")
    return text


def parse_note(data: bytes | str) -> Note:
    """Split a signed note into text and signature lines (signatures are not checked)."""
    try:
        message = data.decode("utf-8") if isinstance(data, bytes) else data
    except UnicodeDecodeError as exc:
        raise NoteError("a signed note must be UTF-8") from exc
    if any(ord(c) < 0x20 and c != "\n" for c in message):
        raise NoteError("a signed note holds a control character other than newline")
    split = message.rfind("\n\n")
    if split < 0 or not message.endswith("\n"):
        raise NoteError("not a signed note: no blank line before signature lines")
    text, block = message[: split + 1], message[split + 2 :]
    lines = block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise NoteError(f"a signed note may carry at most {MAX_SIGNATURES} signatures")
    signatures = []
    for line in lines:
        if not line.startswith(SIGNATURE_PREFIX):
            raise NoteError(f"signature line {line!r} does not start with '— '")
        name, _, encoded = line[len(SIGNATURE_PREFIX) :].partition(" ")
        try:
            check_key_name(name)
            raw = base64.b64decode(encoded, validate=True)
        except (NoteError, binascii.Error) as exc:
            raise NoteError(f"malformed signature line {line!r}") from exc
        if len(raw) < 5:
            raise NoteError(f"signature line {line!r} is too short")
        signatures.append(NoteSignature(name, raw[:4], raw[4:]))
    return Note(check_text(text), tuple(signatures))


def ed25519_signature(text: str, name: str, private_key: Ed25519PrivateKey) -> NoteSignature:
    """The signed-note Ed25519 (type 0x01) signature of ``text`` under ``name``."""
    check_text(text)
    public = raw_public_key(private_key.public_key())
    signature = private_key.sign(text.encode("utf-8"))
    return NoteSignature(check_key_name(name), key_id(name, ED25519, public), signature)


def sign_note(text: str, name: str, private_key: Ed25519PrivateKey) -> str:
    """``text`` as a signed note with one Ed25519 signature under ``name``."""
    return Note(text, (ed25519_signature(text, name, private_key),)).encode()


def verify_ed25519(note: Note, key: VerifierKey) -> None:
    """Raise :class:`NoteError` unless ``key`` (type 0x01) signed the note (every signature
    claiming to be by it must verify, and there must be one)."""
    if key.signature_type != ED25519:
        raise NoteError(f"{key.name} is not a note signing key (type 0x01)")
    claimed = note.signatures_by(key)
    if not claimed:
        raise NoteError(f"the note carries no signature by {key.name}+{key.key_id.hex()}")
    for signature in claimed:
        try:
            key.ed25519.verify(signature.signature, note.text.encode("utf-8"))
        except InvalidSignature as exc:
            raise NoteError(f"invalid signature for key {key.name}+{key.key_id.hex()}") from exc
