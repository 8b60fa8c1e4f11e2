"""DSSE PAE and Ed25519 envelope sign/verify."""

from __future__ import annotations

import base64
import copy

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tpmledger.provenance.dsse import EnvelopeError, pae, sign_envelope, verify_envelope
from tpmledger.provenance.signing_keys import fingerprint


def test_pae_matches_the_dsse_spec_example() -> None:
    # protocol.md of secure-systems-lab/dsse: the worked example.
    assert (
        pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_pae_counts_bytes_not_characters() -> None:
    assert pae("t", "é".encode()) == b"DSSEv1 1 t 2 \xc3\xa9"
    assert pae("", b"") == b"DSSEv1 0  0 "


def test_round_trip_and_keyid_is_fingerprint() -> None:
    key = Ed25519PrivateKey.generate()
    envelope = sign_envelope(b'{"a":1}', key)
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    assert envelope["signatures"][0]["keyid"] == fingerprint(key.public_key())
    verified = verify_envelope(envelope, [key.public_key()])
    assert verified.payload == b'{"a":1}'
    assert verified.key_fingerprint == fingerprint(key.public_key())


def test_signature_covers_pae_not_bare_payload() -> None:
    key = Ed25519PrivateKey.generate()
    envelope = sign_envelope(b"body", key)
    sig = base64.b64decode(envelope["signatures"][0]["sig"])
    key.public_key().verify(sig, pae("application/vnd.in-toto+json", b"body"))


def test_any_trusted_key_may_verify_regardless_of_keyid() -> None:
    old, new = Ed25519PrivateKey.generate(), Ed25519PrivateKey.generate()
    envelope = sign_envelope(b"x", old, keyid="")
    assert verify_envelope(envelope, [new.public_key(), old.public_key()]).payload == b"x"


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda e: e.update(payload=base64.b64encode(b"y").decode()), "signature does not verify"),
        (lambda e: e.update(payloadType="text/plain"), "payloadType"),
        (lambda e: e.update(signatures=[]), "no signatures"),
        (lambda e: e["signatures"][0].update(sig="!!"), "signature is not valid base64"),
        (lambda e: e.update(payload=None), "payload is missing"),
    ],
)
def test_tampering_is_named(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    key = Ed25519PrivateKey.generate()
    envelope = copy.deepcopy(sign_envelope(b"x", key))
    mutate(envelope)
    with pytest.raises(EnvelopeError, match=message):
        verify_envelope(envelope, [key.public_key()])


def test_flipped_signature_byte_fails() -> None:
    key = Ed25519PrivateKey.generate()
    envelope = sign_envelope(b"x", key)
    sig = bytearray(base64.b64decode(envelope["signatures"][0]["sig"]))
    sig[5] ^= 0x01
    envelope["signatures"][0]["sig"] = base64.b64encode(bytes(sig)).decode()
    with pytest.raises(EnvelopeError, match="signature does not verify"):
        verify_envelope(envelope, [key.public_key()])


def test_wrong_key_fails() -> None:
    envelope = sign_envelope(b"x", Ed25519PrivateKey.generate())
    with pytest.raises(EnvelopeError, match="any trusted key"):
        verify_envelope(envelope, [Ed25519PrivateKey.generate().public_key()])
