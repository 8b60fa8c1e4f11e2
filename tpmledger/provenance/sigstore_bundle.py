"""The Sigstore bundle v0.3 form of a run-summary envelope (for cosign and sigstore-js).

Shape (``sigstore/protobuf-specs`` ``Bundle`` message, JSON form): the DSSE envelope under
``dsseEnvelope``; ``verificationMaterial.publicKey.hint`` names our key (its fingerprint),
with no transparency-log entries and no timestamps, since the key is trusted out of band
(``cosign … --key service.pub --insecure-ignore-tlog=true``). The signature ``keyid`` is
empty as the bundle format expects: the key is named by the hint instead.
"""

from __future__ import annotations

import copy
from typing import Any

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"


class BundleError(ValueError):
    """The document is not a v0.3 bundle with a DSSE envelope."""


def bundle_from_envelope(envelope: dict[str, Any], key_hint: str) -> dict[str, Any]:
    """Wrap a DSSE envelope in a Sigstore bundle v0.3 with a public-key hint."""
    dsse = copy.deepcopy(envelope)
    dsse["signatures"] = [{"sig": s["sig"], "keyid": ""} for s in envelope["signatures"]]
    return {
        "mediaType": BUNDLE_MEDIA_TYPE,
        "verificationMaterial": {
            "publicKey": {"hint": key_hint},
            "tlogEntries": [],
            "timestampVerificationData": {"rfc3161Timestamps": []},
        },
        "dsseEnvelope": dsse,
    }


def envelope_from_bundle(bundle: dict[str, Any]) -> dict[str, Any]:
    """The DSSE envelope inside a v0.3 bundle (signature keyids as stored: empty)."""
    if not isinstance(bundle, dict) or bundle.get("mediaType") != BUNDLE_MEDIA_TYPE:
        raise BundleError(f"mediaType is not {BUNDLE_MEDIA_TYPE}")
    envelope = bundle.get("dsseEnvelope")
    if not isinstance(envelope, dict):
        raise BundleError("bundle carries no dsseEnvelope")
    return copy.deepcopy(envelope)
