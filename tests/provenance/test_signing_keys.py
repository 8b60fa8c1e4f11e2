"""Signing key creation (mode 0600), supplied keys, rotation and fingerprints."""

from __future__ import annotations

import hashlib
import stat
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tpmledger.provenance.signing_keys import (
    SigningKeyError,
    load_or_create_signing_key,
    public_keys,
    rotate_signing_key,
)
from tpmledger.settings import Settings


def _settings(tmp_path: Path, **kw: object) -> Settings:
    return Settings(data_dir=tmp_path, **kw)  # type: ignore[arg-type]


def test_first_use_creates_private_key_with_mode_0600(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    key = load_or_create_signing_key(settings)
    assert key.path == tmp_path / "keys" / "signing.key"
    assert stat.S_IMODE(key.path.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "keys").stat().st_mode) == 0o700
    assert (tmp_path / "keys" / "signing.pub").read_text() == key.public_pem
    # A second start loads the same key rather than making a new one.
    assert load_or_create_signing_key(settings).fingerprint == key.fingerprint


def test_fingerprint_is_sha256_of_spki_der(tmp_path: Path) -> None:
    key = load_or_create_signing_key(_settings(tmp_path))
    der = key.public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    assert key.fingerprint == hashlib.sha256(der).hexdigest()


def test_fingerprint_matches_openssl(tmp_path: Path) -> None:
    openssl = subprocess.run(["which", "openssl"], capture_output=True, text=True).stdout.strip()
    if not openssl:
        pytest.skip("openssl not installed")
    key = load_or_create_signing_key(_settings(tmp_path))
    der = subprocess.run(
        [openssl, "pkey", "-pubin", "-outform", "DER"],
        input=key.public_pem.encode(),
        capture_output=True,
        check=True,
    ).stdout
    assert hashlib.sha256(der).hexdigest() == key.fingerprint


def test_supplied_key_is_used_and_never_created(tmp_path: Path) -> None:
    supplied = tmp_path / "operator.pem"
    private = Ed25519PrivateKey.generate()
    supplied.write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    settings = _settings(tmp_path / "data", signing_key_path=supplied)
    key = load_or_create_signing_key(settings)
    assert key.path == supplied
    assert key.private_key.private_bytes_raw() == private.private_bytes_raw()
    assert not (tmp_path / "data" / "keys").exists()
    with pytest.raises(SigningKeyError, match="rotate it where it is"):
        rotate_signing_key(settings)


def test_supplied_key_missing_is_refused_with_a_fix(tmp_path: Path) -> None:
    settings = _settings(tmp_path, signing_key_path=tmp_path / "absent.pem")
    with pytest.raises(SigningKeyError, match="openssl genpkey"):
        load_or_create_signing_key(settings)


def test_env_variable_supplies_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TPMLEDGER_SIGNING_KEY_PATH", str(tmp_path / "k.pem"))
    assert Settings().signing_key_path == tmp_path / "k.pem"


def test_non_ed25519_key_is_refused(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    path = tmp_path / "ec.pem"
    path.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(SigningKeyError, match="not an Ed25519"):
        load_or_create_signing_key(_settings(tmp_path, signing_key_path=path))


def test_rotation_keeps_old_public_keys(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    first = load_or_create_signing_key(settings)
    old, second = rotate_signing_key(settings)
    assert old.fingerprint == first.fingerprint
    assert second.fingerprint != first.fingerprint
    assert load_or_create_signing_key(settings).fingerprint == second.fingerprint
    assert stat.S_IMODE(second.path.stat().st_mode) == 0o600
    assert (tmp_path / "keys" / "retired" / f"{first.fingerprint}.pub").exists()
    _, third = rotate_signing_key(settings)
    listed = public_keys(settings)
    assert listed[0].fingerprint == third.fingerprint
    assert {k.fingerprint for k in listed} == {
        first.fingerprint,
        second.fingerprint,
        third.fingerprint,
    }
    assert [k.current for k in listed] == [True, False, False]


def test_a_key_others_can_read_is_used_but_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(tmp_path)
    key = load_or_create_signing_key(settings)
    assert "mode" not in caplog.text
    key.path.chmod(0o644)
    assert load_or_create_signing_key(settings).fingerprint == key.fingerprint
    assert "chmod 600" in caplog.text
