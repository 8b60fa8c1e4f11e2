"""DSSE envelopes signed with Ed25519, built by hand on ``cryptography``.

Follows the DSSE v1.0 protocol (github.com/secure-systems-lab/dsse, ``protocol.md``):
the signature covers the Pre-Authentication Encoding

    PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body

where ``LEN`` is the byte length as ASCII decimal without leading zeros, and never the
payload alone. The envelope is ``{payload, payloadType, signatures: [{keyid, sig}]}`` with
standard base64. ``keyid`` is an unauthenticated hint; verification tries every trusted key.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from tpmledger.provenance.signing_keys import fingerprint

IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"


class EnvelopeError(ValueError):
    """The envelope is malformed or no signature verifies with a trusted key."""


@dataclass(frozen=True)
class VerifiedEnvelope:
    """The authenticated payload and the fingerprint of the key that verified it."""

    payload: bytes
    payload_type: str
    key_fingerprint: str


def pae(payload_type: str, payload: bytes) -> bytes:
    """The DSSE v1 Pre-Authentication Encoding of ``payload`` under ``payload_type``."""
    type_bytes = payload_type.encode("utf-8")
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(payload), payload)


def sign_envelope(
    payload: bytes,
    private_key: Ed25519PrivateKey,
    *,
    payload_type: str = IN_TOTO_PAYLOAD_TYPE,
    keyid: str | None = None,
) -> dict[str, Any]:
    """A DSSE envelope over ``payload`` with one Ed25519 signature.

    ``keyid`` defaults to the key's fingerprint (SHA-256 of its SPKI DER).
    """
    signature = private_key.sign(pae(payload_type, payload))
    if keyid is None:
        keyid = fingerprint(private_key.public_key())
    return {
        "payload": base64.b64encode(payload).decode("ascii"),
        "payloadType": payload_type,
        "signatures": [{"keyid": keyid, "sig": base64.b64encode(signature).decode("ascii")}],
    }


def verify_envelope(
    envelope: dict[str, Any],
    trusted_keys: Sequence[Ed25519PublicKey],
    *,
    expected_payload_type: str = IN_TOTO_PAYLOAD_TYPE,
) -> VerifiedEnvelope:
    """Check that some signature verifies over the PAE with some trusted key.

    Raises :class:`EnvelopeError` naming what is wrong (shape, payload type, or signature).
    """
    if not isinstance(envelope, dict):
        raise EnvelopeError("envelope is not a JSON object")
    payload_type = envelope.get("payloadType")
    if payload_type != expected_payload_type:
        raise EnvelopeError(f"payloadType is {payload_type!r}, expected {expected_payload_type!r}")
    payload = _b64decode(envelope.get("payload"), "payload")
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise EnvelopeError("envelope has no signatures")
    if not trusted_keys:
        raise EnvelopeError("no trusted public key to verify with")
    message = pae(payload_type, payload)
    for entry in signatures:
        if not isinstance(entry, dict):
            raise EnvelopeError("signature entry is not a JSON object")
        sig = _b64decode(entry.get("sig"), "signature")
        for key in trusted_keys:
            try:
                key.verify(sig, message)
            except InvalidSignature:
                continue
            return VerifiedEnvelope(payload, payload_type, fingerprint(key))
    fingerprints = ", ".join(fingerprint(k)[:16] for k in trusted_keys)
    raise EnvelopeError(f"signature does not verify with any trusted key ({fingerprints})")


def _b64decode(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise EnvelopeError(f"{what} is missing or not a string")
    try:
        # DSSE allows standard or URL-safe base64; we write standard and accept both.
        if "-" in value or "_" in value:
            return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise EnvelopeError(f"{what} is not valid base64: {exc}") from exc
