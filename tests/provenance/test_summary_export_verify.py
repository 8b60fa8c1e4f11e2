"""Export a sealed 8-shard run, verify it offline, and show that any tampering is named."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.provenance.sharded_run import PEAK_MINUTE, RUN_ID, SHARDS, store_sharded_run
from tpmledger.analytics.proofs.summary_export import EXPORT_FILES, build_summary, write_export
from tpmledger.analytics.seal.run_computation import in_seal_view
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.provenance.in_toto_statement import RUN_FIGURE_KEYS
from tpmledger.provenance.minute_proofs import single_proof
from tpmledger.provenance.signing_keys import SigningKey, load_or_create_signing_key, public_key_pem
from tpmledger.provenance.summary_recompute import figure_mismatches, recompute_from_events
from tpmledger.provenance.summary_verify import (
    VerifyReport,
    verify_export,
    verify_path,
    verify_proof_file,
)
from tpmledger.settings import Settings
from tpmledger.storage.schema.models import Snapshot
from tpmledger.storage.server.database import read_session

DOCS = Path(__file__).resolve().parents[2] / "docs" / "provenance.md"


@pytest.fixture
def signing_key(tmp_path: Path) -> SigningKey:
    return load_or_create_signing_key(Settings(data_dir=tmp_path / "data"))  # type: ignore[call-arg]


@pytest.fixture
def export_dir(database_url: str, signing_key: SigningKey, tmp_path: Path) -> Path:
    store_sharded_run(database_url)
    seal_run(database_url, RUN_ID)
    out = tmp_path / "export"
    write_export(
        in_seal_view(
            database_url, build_summary, RUN_ID, signing_key, events_to=out / "events.jsonl"
        ),
        out,
    )
    return out


def failed(report: VerifyReport) -> dict[str, str]:
    return {c.name: c.detail for c in report.checks if not c.ok}


def test_round_trip_export_then_verify_passes(export_dir: Path) -> None:
    assert sorted(p.name for p in export_dir.iterdir()) == sorted(EXPORT_FILES)
    report = verify_export(export_dir)
    assert report.ok, failed(report)
    assert [c.name for c in report.checks] == [
        "key",
        "signature",
        "statement",
        "sigstore bundle",
        "events digest",
        "events canonical",
        "figures",
        "minute tree",
        "minute proofs",
        "SUMMARY.txt",
        "checkpoint",
    ]
    statement = json.loads(
        base64.b64decode(json.loads((export_dir / "summary.dsse.json").read_text())["payload"])
    )
    predicate = statement["predicate"]
    digest = hashlib.sha256((export_dir / "events.jsonl").read_bytes()).hexdigest()
    assert statement["subject"] == [{"name": "events.jsonl", "digest": {"sha256": digest}}]
    assert predicate["peak_minute"]["minute_utc"] == f"2026-02-01T03:{44 + PEAK_MINUTE}:00Z"
    assert predicate["peak_minute"]["shard_count"] == SHARDS
    assert predicate["shard_count"] == SHARDS
    text = (export_dir / "SUMMARY.txt").read_text()
    assert f"run_id: {RUN_ID}\n" in text
    assert f"  tpm_total: {predicate['peak_minute']['tpm_total']}\n" in text
    assert f"events_sha256: {digest}\n" in text


def test_recomputed_figures_equal_the_database_snapshot(database_url: str) -> None:
    store_sharded_run(database_url)
    result = seal_run(database_url, RUN_ID)
    with read_session(database_url) as session:
        snapshot = session.get(Snapshot, (RUN_ID, result.version))
        assert snapshot is not None
    from tpmledger.analytics.proofs.run_events import load_run_events
    from tpmledger.provenance.event_file import build_event_file

    data = build_event_file(load_run_events(database_url, RUN_ID)).tobytes()
    assert hashlib.sha256(data).hexdigest() == snapshot.events_sha256
    again = recompute_from_events(data)
    stored = {k: snapshot.metrics[k] for k in RUN_FIGURE_KEYS}
    assert figure_mismatches(stored, {k: again.figures[k] for k in RUN_FIGURE_KEYS}) == []
    # Integer figures agree exactly, not merely within the float tolerance.
    assert again.figures["peak_minute"] == stored["peak_minute"]
    assert again.figures["attempts"] == stored["attempts"] == snapshot.events_count
    assert again.figures["retry_causes"] == stored["retry_causes"]
    assert again.figures["retry_rate"] is not None


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def _edit_json(path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    document = json.loads(path.read_text())
    edit(document)
    path.write_text(json.dumps(document))


def _flip_b64(value: str, index: int) -> str:
    raw = bytearray(base64.b64decode(value))
    raw[index] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


def test_flipped_event_byte_is_named(export_dir: Path) -> None:
    events = export_dir / "events.jsonl"
    line = events.read_bytes().index(b'"prompt_tokens":') + len(b'"prompt_tokens":')
    _flip(events, line)  # one digit of one token count
    problems = failed(verify_export(export_dir))
    assert "events.jsonl does not match the signed subject" in problems["events digest"]
    assert "figures" in problems or "minute tree" in problems


def test_a_summary_txt_claiming_another_peak_is_refused(export_dir: Path) -> None:
    """SUMMARY.txt is what people read: a block saying a 10x higher peak than the signed
    predicate fails verification, naming the figure (everything else still verifies)."""
    path = export_dir / "SUMMARY.txt"
    text = path.read_text()
    start = text.index("peak_minute:\n")
    line = text.index("  tpm_total: ", start)
    end = text.index("\n", line)
    signed = text[line + len("  tpm_total: ") : end]
    path.write_text(text[:line] + f"  tpm_total: {int(signed) * 10}" + text[end:])
    problems = failed(verify_export(export_dir))
    assert list(problems) == ["SUMMARY.txt"]
    assert f"peak_minute.tpm_total: signed '{signed}'" in problems["SUMMARY.txt"]
    assert f"'{int(signed) * 10}'" in problems["SUMMARY.txt"]
    # An added claim is refused as well.
    path.write_text(text + "certified_by: nobody\n")
    assert "'nobody' is not signed" in failed(verify_export(export_dir))["SUMMARY.txt"]


def test_flipped_payload_byte_is_named(export_dir: Path) -> None:
    path = export_dir / "summary.dsse.json"
    _edit_json(path, lambda e: e.update(payload=_flip_b64(e["payload"], 200)))
    assert "summary signature" in failed(verify_export(export_dir))["signature"]


def test_flipped_signature_byte_is_named(export_dir: Path) -> None:
    path = export_dir / "summary.dsse.json"
    _edit_json(
        path, lambda e: e["signatures"][0].update(sig=_flip_b64(e["signatures"][0]["sig"], 7))
    )
    problems = failed(verify_export(export_dir))
    assert "signature does not verify" in problems["signature"]


def test_flipped_proof_byte_is_named(export_dir: Path) -> None:
    path = export_dir / "minute-proofs.json"

    def flip_first_path_element(doc: dict) -> None:  # type: ignore[type-arg]
        hop = doc["minutes"][2]["proof"][0]
        doc["minutes"][2]["proof"][0] = ("1" if hop[0] == "0" else "0") + hop[1:]

    _edit_json(path, flip_first_path_element)
    problems = failed(verify_export(export_dir))
    assert list(problems) == ["minute proofs"]
    assert (
        "03:46:00Z: inclusion proof does not lead to the signed Merkle root"
        in problems["minute proofs"]
    )


def test_changed_sigstore_bundle_is_named(export_dir: Path) -> None:
    path = export_dir / "summary.sigstore.json"
    _edit_json(
        path,
        lambda b: b["dsseEnvelope"].update(payload=_flip_b64(b["dsseEnvelope"]["payload"], 10)),
    )
    assert list(failed(verify_export(export_dir))) == ["sigstore bundle"]


def test_an_untrusted_key_fails_even_if_service_pub_is_swapped(
    export_dir: Path, tmp_path: Path
) -> None:
    pinned = tmp_path / "pinned.pub"
    pinned.write_text(public_key_pem(Ed25519PrivateKey.generate().public_key()))
    assert "signature" in failed(verify_export(export_dir, pinned))


def test_single_minute_proof_file(
    database_url: str, export_dir: Path, signing_key: SigningKey
) -> None:
    summary = in_seal_view(database_url, build_summary, RUN_ID, signing_key)
    proof = single_proof(summary.minute_proofs, "2026-02-01T03:48:00Z", summary.envelope)
    path = export_dir / "minute-0348.json"
    path.write_text(json.dumps(proof))
    report = verify_path(path)
    assert report.ok, failed(report)
    assert "03:48:00Z" in report.checks[-1].detail
    proof["leaf"]["tpm_total"] += 1
    path.write_text(json.dumps(proof))
    assert "minute proof" in failed(verify_proof_file(path))


def docs_script() -> str:
    text = DOCS.read_text()
    block = re.search(r"<!-- verify-script:start -->\n```python\n(.*?)```", text, re.S)
    assert block, "docs/provenance.md lost its verify script"
    return block.group(1)


def test_docs_python_script_verifies_the_export(export_dir: Path, tmp_path: Path) -> None:
    script = tmp_path / "verify_summary.py"
    script.write_text(docs_script())
    assert len(docs_script().splitlines()) <= 26
    ok = subprocess.run(
        [sys.executable, str(script), str(export_dir)], capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith(f"OK {RUN_ID} 2026-02-01T03:48:00Z tpm_total ")
    _flip(export_dir / "events.jsonl", 40)
    broken = subprocess.run(
        [sys.executable, str(script), str(export_dir)], capture_output=True, text=True
    )
    assert broken.returncode != 0


def test_copies_of_one_good_proof_do_not_cover_the_run(export_dir: Path) -> None:
    path = export_dir / "minute-proofs.json"
    _edit_json(path, lambda doc: doc.update(minutes=[doc["minutes"][0]] * len(doc["minutes"])))
    assert "expected each of 0..8 once" in failed(verify_export(export_dir))["minute proofs"]
