"""Our envelopes verify with other people's DSSE / Sigstore code, not only with ours."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, NoReturn

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import SSlibKey

from tpmledger.analytics.seal.run_computation import in_seal_view
from tpmledger.provenance.dsse import sign_envelope
from tpmledger.provenance.in_toto_statement import (
    build_predicate,
    build_statement,
    statement_payload,
)
from tpmledger.provenance.signing_keys import fingerprint, public_key_pem
from tpmledger.provenance.sigstore_bundle import bundle_from_envelope

NODE_DIR = Path(__file__).parent / "node"
PEAK = {
    "minute_utc": "2026-02-01T03:44:00Z",
    "shard_count": 8,
    "calls_in_minute": 412,
    "completion_tpm_out": 401_000,
    "prompt_tpm_in": 337_652,
    "tpm_total": 738_652,
}


def fixed_payload() -> bytes:
    """A run-summary statement with fixed figures (no database needed)."""
    figures: dict[str, Any] = {
        "run_id": "newgen_full_20260201_030151_sharded",
        "attempts": 5000,
        "logical_calls": 4900,
        "shard_count": 8,
        "first_event_utc": "2026-02-01T03:02:00.000Z",
        "last_event_utc": "2026-02-01T04:01:00.000Z",
        "active_minutes": 60,
        "peak_minute": PEAK,
        "peak_completion_minute": PEAK,
        "sustained_tpm_total": 701_000.5,
        "attempt_success_rate": 0.98,
        "call_success_rate": 0.995,
        "retry_rate": 0.02,
        "retry_causes": {"http_429": 100},
        "ttft_s": {"p50": 0.2, "p95": 0.9, "p99": 1.4, "mean": 0.3, "variance": 0.04},
        "shard_balance": {"shares": {"0": 0.125}, "imbalance": 1.01},
    }
    predicate = build_predicate(
        figures,
        events_sha256="ab" * 32,
        events_count=5000,
        merkle_root="cd" * 32,
        tree_size=60,
        snapshot_version=1,
        seal="ef" * 32,
        computed_at="2026-02-01T04:02:00Z",
        generator={"name": "tpmledger", "version": "0.1.0"},
    )
    return statement_payload(build_statement(predicate))


def sslib_key(private: Ed25519PrivateKey, keyid: str) -> SSlibKey:
    return SSlibKey.from_crypto(private.public_key(), keyid=keyid, scheme="ed25519")


def test_securesystemslib_verifies_our_envelope_with_the_fingerprint_keyid() -> None:
    private = Ed25519PrivateKey.generate()
    envelope = sign_envelope(fixed_payload(), private)
    keyid = fingerprint(private.public_key())
    # Round-trip through JSON text, as a reader of summary.dsse.json would.
    parsed = Envelope.from_dict(json.loads(json.dumps(envelope)))
    accepted = parsed.verify([sslib_key(private, keyid)], threshold=1)
    assert list(accepted) == [keyid]
    assert parsed.payload == fixed_payload()
    assert parsed.pae().startswith(b"DSSEv1 28 application/vnd.in-toto+json ")


def test_securesystemslib_rejects_a_tampered_payload() -> None:
    private = Ed25519PrivateKey.generate()
    envelope = sign_envelope(fixed_payload(), private)
    parsed = Envelope.from_dict(json.loads(json.dumps(envelope)))
    parsed.payload = parsed.payload.replace(b"738652", b"738653")
    with pytest.raises(VerificationError):
        parsed.verify([sslib_key(private, fingerprint(private.public_key()))], threshold=1)


def sigstore_js_unavailable(reason: str) -> NoReturn:
    """Skip on a developer machine; fail in CI (``CI=true``), where the check must run."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the sigstore-js interop check must run in CI)")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def sigstore_js(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temp folder with @sigstore/verify installed from npm; skipped (failed in CI)
    when node or npm is missing or the package cannot be installed."""
    npm, node = shutil.which("npm"), shutil.which("node")
    if not npm or not node:
        sigstore_js_unavailable("node/npm not installed")
    work = tmp_path_factory.mktemp("sigstore-js")
    for name in ("package.json", "verify_bundle.js"):
        shutil.copy(NODE_DIR / name, work / name)
    try:
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=work,
            check=True,
            capture_output=True,
            timeout=300,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        output = (exc.stderr or b"").decode(errors="replace").strip().splitlines()
        sigstore_js_unavailable(
            f"npm install of @sigstore/verify failed: {exc}" + (f": {output[-1]}" if output else "")
        )
    return work


def run_sigstore_js(work: Path, bundle: dict[str, Any], pem: str) -> subprocess.CompletedProcess:
    (work / "bundle.json").write_text(json.dumps(bundle))
    (work / "service.pub").write_text(pem)
    return subprocess.run(
        ["node", "verify_bundle.js", "bundle.json", "service.pub"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.slow
def test_sigstore_js_verifies_our_bundle(sigstore_js: Path) -> None:
    private = Ed25519PrivateKey.generate()
    envelope = sign_envelope(fixed_payload(), private)
    bundle = bundle_from_envelope(envelope, fingerprint(private.public_key()))
    assert bundle["dsseEnvelope"]["signatures"][0]["keyid"] == ""
    result = run_sigstore_js(sigstore_js, bundle, public_key_pem(private.public_key()))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("OK")


def test_sigstore_js_rejects_a_wrong_key(sigstore_js: Path) -> None:
    private = Ed25519PrivateKey.generate()
    bundle = bundle_from_envelope(sign_envelope(fixed_payload(), private), "hint")
    other = public_key_pem(Ed25519PrivateKey.generate().public_key())
    result = run_sigstore_js(sigstore_js, bundle, other)
    assert result.returncode == 1
    assert "signature verification failed" in result.stdout


def test_a_real_export_verifies_with_securesystemslib_and_sigstore_js(
    database_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from tests.provenance.sharded_run import RUN_ID, store_sharded_run
    from tpmledger.analytics.proofs.summary_export import build_summary, write_export
    from tpmledger.analytics.seal.sealing import seal_run
    from tpmledger.provenance.signing_keys import load_or_create_signing_key
    from tpmledger.settings import Settings

    store_sharded_run(database_url)
    seal_run(database_url, RUN_ID)
    key = load_or_create_signing_key(Settings(data_dir=tmp_path))  # type: ignore[call-arg]
    out = tmp_path / "export"
    write_export(
        in_seal_view(database_url, build_summary, RUN_ID, key, events_to=out / "events.jsonl"), out
    )
    envelope = Envelope.from_dict(json.loads((out / "summary.dsse.json").read_text()))
    assert list(envelope.verify([sslib_key(key.private_key, key.fingerprint)], 1)) == [
        key.fingerprint
    ]
    if shutil.which("node") and shutil.which("npm"):
        work = request.getfixturevalue("sigstore_js")
        bundle = json.loads((out / "summary.sigstore.json").read_text())
        result = run_sigstore_js(work, bundle, (out / "service.pub").read_text())
        assert result.returncode == 0, result.stdout + result.stderr
