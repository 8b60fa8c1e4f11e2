"""Ed25519 signing keys: created on first use, supplied by path, rotated without losing history.

Layout under ``location.keys_dir`` (docs/provenance.md "The signing key is created on first start
(file
mode 0600) or supplied"):

- ``signing.key`` — the current private key (PKCS#8 PEM, mode 0600, directory mode 0700);
- ``signing.pub`` — its public half (SPKI PEM);
- ``retired/<fingerprint>.pub`` — public halves of rotated-out keys, kept so summaries
  signed before a rotation still verify.

``location.signing_key_path`` (``TPMLEDGER_SIGNING_KEY_PATH``) points at an operator-managed
key instead; such a key is never created, overwritten or rotated by tpmledger.
The fingerprint (and DSSE ``keyid``) is the hex SHA-256 of the public key's SPKI DER.
``location`` is anything with those two attributes (the service passes its ``Settings``), so
this library imports nothing of the application.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

log = logging.getLogger(__name__)

PRIVATE_KEY_FILE = "signing.key"
PUBLIC_KEY_FILE = "signing.pub"
RETIRED_DIR = "retired"


class KeyLocation(Protocol):
    """Where the keys live (``tpmledger.settings.Settings`` satisfies it)."""

    @property
    def keys_dir(self) -> Path:
        """Directory of the managed key (``signing.key``, ``signing.pub``, ``retired/``)."""
        ...

    @property
    def signing_key_path(self) -> Path | None:
        """An operator-supplied private key, used instead of the managed one when set."""
        ...


class SigningKeyError(RuntimeError):
    """The configured key is missing, unreadable, not Ed25519, or cannot be rotated."""


@dataclass(frozen=True)
class PublicKeyInfo:
    """A public key the service signs or signed with."""

    public_key: Ed25519PublicKey
    fingerprint: str
    current: bool

    @property
    def pem(self) -> str:
        return public_key_pem(self.public_key)


@dataclass(frozen=True)
class SigningKey:
    """The private key in use, with its identifiers."""

    private_key: Ed25519PrivateKey
    path: Path

    @property
    def public_key(self) -> Ed25519PublicKey:
        return self.private_key.public_key()

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public_key)

    @property
    def public_pem(self) -> str:
        return public_key_pem(self.public_key)


def fingerprint(public_key: Ed25519PublicKey) -> str:
    """Hex SHA-256 of the SPKI DER encoding (``openssl pkey -pubin -outform DER | sha256sum``)."""
    der = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()


def public_key_pem(public_key: Ed25519PublicKey) -> str:
    """The SPKI PEM text of a public key."""
    return public_key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode("ascii")


def load_public_key_pem(data: bytes) -> Ed25519PublicKey:
    """Parse an SPKI PEM public key; refuse anything but Ed25519."""
    key = serialization.load_pem_public_key(data)
    if not isinstance(key, Ed25519PublicKey):
        raise SigningKeyError(f"not an Ed25519 public key: {type(key).__name__}")
    return key


def load_or_create_signing_key(location: KeyLocation) -> SigningKey:
    """The signing key: the supplied one, else the one in ``keys_dir`` (created if absent)."""
    if location.signing_key_path is not None:
        path = location.signing_key_path
        if not path.exists():
            raise SigningKeyError(
                f"TPMLEDGER_SIGNING_KEY_PATH={path} does not exist; create an Ed25519 key with "
                "`openssl genpkey -algorithm ed25519 -out KEY` or unset it to use a managed key"
            )
        _warn_if_exposed(path)
        return SigningKey(_read_private_key(path), path)
    path = location.keys_dir / PRIVATE_KEY_FILE
    if not path.exists():
        _create_key_file(location.keys_dir)
    _warn_if_exposed(path)
    return SigningKey(_read_private_key(path), path)


def rotate_signing_key(location: KeyLocation) -> tuple[SigningKey, SigningKey]:
    """Retire the current managed key (its public half is kept) and create a new one."""
    if location.signing_key_path is not None:
        raise SigningKeyError(
            "the signing key is supplied by TPMLEDGER_SIGNING_KEY_PATH; rotate it where it is "
            "managed (keep the old public key to verify older summaries with --key)"
        )
    old = load_or_create_signing_key(location)
    retired = location.keys_dir / RETIRED_DIR
    retired.mkdir(mode=0o700, exist_ok=True)
    _write_atomically(retired / f"{old.fingerprint}.pub", old.public_pem.encode(), 0o644)
    new_private = Ed25519PrivateKey.generate()
    # Replace in one rename so a concurrent reader sees the old or the new key, never half.
    _write_atomically(old.path, _private_pem(new_private), 0o600)
    _write_atomically(
        location.keys_dir / PUBLIC_KEY_FILE,
        public_key_pem(new_private.public_key()).encode(),
        0o644,
    )
    return old, SigningKey(new_private, old.path)


def public_keys(location: KeyLocation) -> list[PublicKeyInfo]:
    """The current public key first, then every retired one (oldest file first)."""
    current = load_or_create_signing_key(location)
    keys = [PublicKeyInfo(current.public_key, current.fingerprint, current=True)]
    retired = location.keys_dir / RETIRED_DIR
    if retired.is_dir():
        for path in sorted(retired.glob("*.pub"), key=lambda p: p.stat().st_mtime):
            key = load_public_key_pem(path.read_bytes())
            if fingerprint(key) != current.fingerprint:
                keys.append(PublicKeyInfo(key, fingerprint(key), current=False))
    return keys


def _warn_if_exposed(path: Path) -> None:
    """Log (not refuse: Docker secrets are often mode 0444) a key others may read or write."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return
    if mode & 0o077:
        log.warning(
            "signing key %s has mode %o; other users may read it (chmod 600 %s)", path, mode, path
        )


def _read_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise SigningKeyError(f"cannot read signing key {path}: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise SigningKeyError(f"{path} is not an Ed25519 private key ({type(key).__name__})")
    return key


def _private_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _create_key_file(keys_dir: Path) -> None:
    """Create ``signing.key`` unless another process wins the race (then keep theirs)."""
    keys_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    key = Ed25519PrivateKey.generate()
    tmp = _temp_file(keys_dir, _private_pem(key), 0o600)
    try:
        # link() fails if the target exists: two first starts cannot both create a key.
        os.link(tmp, keys_dir / PRIVATE_KEY_FILE)
    except FileExistsError:
        return
    finally:
        tmp.unlink()
    _write_atomically(keys_dir / PUBLIC_KEY_FILE, public_key_pem(key.public_key()).encode(), 0o644)


def _temp_file(directory: Path, data: bytes, mode: int) -> Path:
    fd, name = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        os.fchmod(fd, mode)  # set before any byte of the key is written
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    return Path(name)


def _write_atomically(path: Path, data: bytes, mode: int) -> None:
    tmp = _temp_file(path.parent, data, mode)
    os.replace(tmp, path)
