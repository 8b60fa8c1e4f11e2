"""Offline verification of a signed run summary (docs/provenance.md): no database, no network.

Checks, each reported pass/fail with what broke:

1. ``signature`` — some Ed25519 signature in ``summary.dsse.json`` verifies over the DSSE
   PAE with the trusted key (``--key``, else the export's own ``service.pub``);
2. ``statement`` — the payload is an in-toto Statement v1 of type
   ``urn:tpmledger:run-summary:v1``;
3. ``sigstore bundle`` — ``summary.sigstore.json`` carries the same signed payload;
4. ``events digest`` — ``events.jsonl`` hashes to the subject digest and has the signed count;
5. ``events canonical`` — every line is the RFC 8785 form of its event (by the reference's
   line grammar, or parsed and written again) and the lines are in order;
6. ``figures`` — every figure of the predicate, recomputed from ``events.jsonl`` alone;
7. ``minute tree`` — the minute Merkle root and size, recomputed from ``events.jsonl``;
8. ``minute proofs`` — every proof of ``minute-proofs.json`` leads to the signed root;
9. ``checkpoint`` (when the export has one) and, with a witness key, ``cosignature``
   (:mod:`provenance.checkpoint_verify`);
10. ``SUMMARY.txt`` — the human block says exactly what the signed predicate says (it is
    what people read; a block claiming another figure than the one signed is refused).

Checks 4–7 take one pass over ``events.jsonl`` (read a block at a time, never whole) with
the reference recomputation (:mod:`provenance.summary_recompute`, standard library only),
never the code that sealed the run; this module imports no database driver, Polars or
Numba.

A single proof file from ``summary prove`` is checked against the envelope it carries.

:func:`verify_archive` is the bounded check ``tpmledger prune`` makes before deleting raw
spans: checks 1–4, 8 and 9 only (no recomputation), so its memory follows a block of the
event file and the minutes, not the attempts.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tpmledger.provenance.checkpoint_verify import checkpoint_checks
from tpmledger.provenance.dsse import EnvelopeError, verify_envelope
from tpmledger.provenance.in_toto_statement import (
    RUN_FIGURE_KEYS,
    StatementError,
    parse_statement,
    subject_sha256,
)
from tpmledger.provenance.minute_proofs import check_minute_proof
from tpmledger.provenance.signed_note import VerifierKey
from tpmledger.provenance.signing_keys import SigningKeyError, fingerprint, load_public_key_pem
from tpmledger.provenance.sigstore_bundle import BundleError, envelope_from_bundle
from tpmledger.provenance.summary_recompute import (
    Recomputed,
    figure_mismatches,
    recompute_from_blocks,
)
from tpmledger.provenance.summary_text import summary_entries, summary_text


@dataclass(frozen=True)
class Check:
    """One named verification step and its outcome."""

    name: str
    ok: bool
    detail: str


@dataclass
class VerifyReport:
    """Every check run, in order; the summary verifies only if all passed."""

    checks: list[Check] = field(default_factory=list)
    #: The signed predicate once the signature verified (run id, events, snapshot seal).
    predicate: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    def add(self, name: str, ok: bool, detail: str) -> bool:
        self.checks.append(Check(name, ok, detail))
        return ok

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "checks": [asdict(c) for c in self.checks]}


def _open_export(
    directory: Path, key_path: Path | None, report: VerifyReport
) -> tuple[dict[str, Any], Path] | None:
    """The signed predicate and the event file of an export, with the key, signature and
    bundle checks recorded in ``report``; ``None`` when either cannot be had."""
    envelope = _read_json(directory / "summary.dsse.json", report, "envelope")
    key_file = key_path or directory / "service.pub"
    predicate = _signed_predicate(envelope, key_file, report, key_path)
    if predicate is None:
        return None
    _check_bundle(directory / "summary.sigstore.json", envelope, report)
    events_path = _events_path(directory, report)
    if events_path is None:
        return None
    return predicate, events_path


def verify_export(
    directory: Path, key_path: Path | None = None, witness: VerifierKey | None = None
) -> VerifyReport:
    """Verify an export directory (``tpmledger summary export`` output); with ``witness``,
    require its cosignature on the directory's checkpoint."""
    report = VerifyReport()
    opened = _open_export(directory, key_path, report)
    if opened is None:
        return report
    predicate, events_path = opened
    # One pass over the file: its digest and line count beside the recomputation.
    reading = _EventsReading(events_path)
    recomputed: Recomputed | None = None
    problem: Exception | None = None
    try:
        recomputed = recompute_from_blocks(reading.blocks)
    except Exception as exc:  # any parse/compute failure means the file cannot back the claim
        problem = exc
    reading.finish()
    _check_events_digest(predicate, reading, report)
    if recomputed is None:
        report.add("events canonical", False, f"events.jsonl cannot be read: {problem}")
        return report
    report.add(
        "events canonical",
        recomputed.canonical,
        "re-serialised events reproduce events.jsonl byte for byte"
        if recomputed.canonical
        else "events.jsonl is not in canonical form (JCS lines in (end_ns, trace_id, span_id) "
        f"order): {recomputed.canonical_problem}",
    )
    _check_figures(predicate, recomputed.figures, report)
    root, size = recomputed.merkle_root, recomputed.tree_size
    signed = predicate["minutes"]
    ok = (root, size) == (signed.get("merkle_root"), signed.get("tree_size"))
    report.add(
        "minute tree",
        ok,
        f"root {root} over {size} minutes, recomputed from events.jsonl"
        if ok
        else f"recomputed minute Merkle root {root} ({size} minutes) differs from the signed "
        f"{signed.get('merkle_root')} ({signed.get('tree_size')} minutes)",
    )
    proofs = _read_json(directory / "minute-proofs.json", report, "minute proofs")
    if proofs is not None:
        _check_proofs(proofs, signed, recomputed.leaves, report)
    _check_summary_text(directory, predicate, key_path, report)
    for name, ok, detail in checkpoint_checks(
        directory,
        predicate,
        load_public_key_pem((key_path or directory / "service.pub").read_bytes()),
        witness,
    ):
        report.add(name, ok, detail)
    return report


def verify_archive(directory: Path, key_path: Path | None = None) -> VerifyReport:
    """The bounded check ``tpmledger prune`` makes of an archive before deleting raw spans
    (docs/configuration.md#retention): key, signature, statement, sigstore bundle, events
    digest (the file decompressed a block at a time: SHA-256 and line count against the
    signed ones), minute proofs (each leads to the signed root, every minute once) and the
    checkpoint. It does not recompute the figures or the minute tree from the events (the
    seal that signed them just did): memory follows a block and the minutes, never the
    attempts. ``tpmledger summary verify DIR`` (:func:`verify_export`) does the full
    recomputation offline."""
    report = VerifyReport()
    opened = _open_export(directory, key_path, report)
    if opened is None:
        return report
    predicate, events_path = opened
    report.predicate = predicate
    reading = _EventsReading(events_path)
    try:
        reading.finish()
    except (OSError, EOFError, zlib.error) as exc:  # a damaged gzip stream or an I/O error
        report.add("events digest", False, f"{events_path} cannot be read: {exc}")
        return report
    _check_events_digest(predicate, reading, report)
    proofs = _read_json(directory / "minute-proofs.json", report, "minute proofs")
    if proofs is not None:
        _check_proofs(proofs, predicate["minutes"], None, report)
    _check_summary_text(directory, predicate, key_path, report)
    for name, ok, detail in checkpoint_checks(
        directory,
        predicate,
        load_public_key_pem((key_path or directory / "service.pub").read_bytes()),
        None,
    ):
        report.add(name, ok, detail)
    return report


def _events_path(directory: Path, report: VerifyReport) -> Path | None:
    """``events.jsonl``, else ``events.jsonl.gz`` (an archive keeps it compressed)."""
    events_path = directory / "events.jsonl"
    packed = directory / "events.jsonl.gz"
    if not events_path.is_file() and packed.is_file():
        events_path = packed
    if not events_path.is_file():
        report.add("events digest", False, f"{events_path} is missing")
        return None
    return events_path


def _check_events_digest(
    predicate: dict[str, Any], reading: _EventsReading, report: VerifyReport
) -> None:
    statement_digest = predicate["_subject_sha256"]
    actual, count = reading.sha256.hexdigest(), reading.count
    ok = actual == statement_digest == predicate["events"]["sha256"]
    ok = ok and count == predicate["events"]["count"]
    report.add(
        "events digest",
        ok,
        f"sha256(events.jsonl) = {actual}, {count} lines"
        if ok
        else f"events.jsonl does not match the signed subject: sha256 {actual} vs signed "
        f"{statement_digest}, {count} lines vs signed {predicate['events']['count']}",
    )


class _EventsReading:
    """``events.jsonl`` (or its ``.gz``) read a block at a time (:attr:`blocks`), hashed and
    counted as the recomputation consumes it: the file is read once and never held whole."""

    BLOCK_BYTES = 4 << 20

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sha256 = hashlib.sha256()  # of the uncompressed file, as signed
        self.count = 0
        self.blocks = self._read()

    def finish(self) -> None:
        """Read what the recomputation left (it stops at a line that is not an event)."""
        for _ in self.blocks:
            pass

    def _read(self) -> Iterator[bytes]:
        opener = gzip.open if self.path.suffix == ".gz" else open
        with opener(self.path, "rb") as file:
            while block := file.read(self.BLOCK_BYTES):
                self.sha256.update(block)
                self.count += block.count(b"\n")
                yield block


def verify_proof_file(
    path: Path, key_path: Path | None = None, envelope_path: Path | None = None
) -> VerifyReport:
    """Verify one minute's proof (``summary prove`` output) against its signed envelope."""
    report = VerifyReport()
    proof = _read_json(path, report, "proof file")
    if proof is None:
        return report
    if not isinstance(proof, dict):
        report.add(
            "proof file", False, f"{path} holds a JSON {type(proof).__name__}, not an object"
        )
        return report
    envelope = (
        _read_json(envelope_path, report, "envelope") if envelope_path else proof.get("envelope")
    )
    if envelope is None:
        report.add("envelope", False, "the proof file carries no envelope; pass --envelope")
        return report
    predicate = _signed_predicate(
        envelope, key_path or path.parent / "service.pub", report, key_path
    )
    if predicate is None:
        return report
    signed = predicate["minutes"]
    problem = check_minute_proof(proof, signed["merkle_root"], signed["tree_size"])
    leaf = proof.get("leaf") or {}
    report.add(
        "minute proof",
        problem is None,
        problem
        or f"minute {leaf.get('minute_utc')} (tpm_total {leaf.get('tpm_total')}, "
        f"calls {leaf.get('calls_in_minute')}) is leaf {proof.get('index')} of the signed tree",
    )
    return report


def _signed_predicate(
    envelope: Any, key_file: Path, report: VerifyReport, pinned: Path | None
) -> dict[str, Any] | None:
    """Check key, signature and statement; the predicate (with the subject digest) or None."""
    if envelope is None:
        return None
    try:
        key = load_public_key_pem(key_file.read_bytes())
    except (OSError, ValueError, SigningKeyError) as exc:
        report.add("key", False, f"cannot load the public key {key_file}: {exc}")
        return None
    origin = "pinned with --key" if pinned else f"{key_file.name} shipped with it; pin with --key"
    report.add("key", True, f"Ed25519 key {fingerprint(key)} ({origin})")
    try:
        verified = verify_envelope(envelope, [key])
        report.add("signature", True, "Ed25519 signature over the DSSE PAE verifies")
        payload = verified.payload
    except EnvelopeError as exc:
        report.add("signature", False, f"summary signature: {exc}")
        return None
    try:
        statement = parse_statement(payload)
        digest = subject_sha256(statement)
    except StatementError as exc:
        report.add("statement", False, str(exc))
        return None
    report.add(
        "statement", True, f"in-toto Statement v1 for run {statement['predicate']['run_id']}"
    )
    return {**statement["predicate"], "_subject_sha256": digest}


def _check_summary_text(
    directory: Path, predicate: dict[str, Any], key_path: Path | None, report: VerifyReport
) -> None:
    """``SUMMARY.txt`` must be the human block of the signed predicate, figure for figure."""
    try:
        text = (directory / "SUMMARY.txt").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        report.add("SUMMARY.txt", False, f"cannot read SUMMARY.txt: {exc}")
        return
    signed = {k: v for k, v in predicate.items() if not k.startswith("_")}
    key = load_public_key_pem((key_path or directory / "service.pub").read_bytes())
    expected = Counter(summary_entries(summary_text(signed, fingerprint(key))))
    found = Counter(summary_entries(text))
    if found == expected:
        report.add("SUMMARY.txt", True, "the human block says what the signed predicate says")
        return
    said = dict(found - expected)
    differences = [
        f"{'.'.join(path) or 'line'}: signed {value!r}, SUMMARY.txt "
        f"{next((v for p, v in said if p == path), 'nothing')!r}"
        for path, value in sorted(expected - found)
    ] + [
        f"{'.'.join(path) or 'line'}: {value!r} is not signed"
        for path, value in sorted(found - expected)
        if path not in {p for p, _ in expected - found}
    ]
    report.add(
        "SUMMARY.txt",
        False,
        "SUMMARY.txt says something the signed predicate does not (it is what people read; "
        "`tpmledger summary show` prints the signed one): " + "; ".join(differences[:5]),
    )


def _check_bundle(path: Path, envelope: dict[str, Any], report: VerifyReport) -> None:
    bundle = _read_json(path, report, "sigstore bundle")
    if bundle is None:
        return
    try:
        inner = envelope_from_bundle(bundle)
    except BundleError as exc:
        report.add("sigstore bundle", False, str(exc))
        return
    same = (inner.get("payload"), inner.get("payloadType")) == (
        envelope["payload"],
        envelope["payloadType"],
    ) and [s.get("sig") for s in inner.get("signatures", [])] == [
        s.get("sig") for s in envelope["signatures"]
    ]
    report.add(
        "sigstore bundle",
        same,
        "summary.sigstore.json carries the same signed payload"
        if same
        else "summary.sigstore.json differs from summary.dsse.json (payload or signature)",
    )


def _check_figures(
    predicate: dict[str, Any], recomputed: dict[str, Any], report: VerifyReport
) -> None:
    signed = {k: predicate[k] for k in RUN_FIGURE_KEYS}
    again = {k: recomputed.get(k) for k in RUN_FIGURE_KEYS}
    mismatches = figure_mismatches(signed, again)
    report.add(
        "figures",
        not mismatches,
        f"all {len(RUN_FIGURE_KEYS)} predicate figures recomputed from events.jsonl match"
        if not mismatches
        else "recomputed figures differ: " + "; ".join(mismatches[:8]),
    )


def _check_proofs(
    proofs: dict[str, Any],
    signed: dict[str, Any],
    leaves: list[dict[str, Any]] | None,
    report: VerifyReport,
) -> None:
    """Every proof leads to the signed root, each minute once; with ``leaves`` (recomputed
    from the events) each proven leaf must also equal its recomputed one."""
    problems: list[str] = []
    if not isinstance(proofs, dict) or not isinstance(proofs.get("minutes"), list):
        report.add("minute proofs", False, "minute-proofs.json has no list of minutes")
        return
    entries = proofs["minutes"]
    if proofs.get("merkle_root") != signed["merkle_root"]:
        problems.append("minute-proofs.json names a different Merkle root than the signed one")
    indices = [e.get("index") for e in entries if isinstance(e, dict)]
    if indices != list(range(signed["tree_size"])):
        # Every minute must be proven once, in order: a copy of one good proof is not enough.
        problems.append(
            f"proofs cover indices {len(set(indices))} distinct of {len(indices)}, "
            f"expected each of 0..{signed['tree_size'] - 1} once"
        )
    for entry in entries:
        if not isinstance(entry, dict):
            problems.append("a proof entry is not a JSON object")
            continue
        problem = check_minute_proof(entry, signed["merkle_root"], signed["tree_size"])
        index = entry.get("index")
        expected = (
            leaves[index]
            if leaves is not None and isinstance(index, int) and 0 <= index < len(leaves)
            else None
        )
        if problem is None and expected is not None and entry["leaf"] != expected:
            problem = f"minute {entry['leaf'].get('minute_utc')}: leaf differs from events.jsonl"
        if problem:
            problems.append(problem)
    report.add(
        "minute proofs",
        not problems,
        f"{len(entries)} of {signed['tree_size']} minute proofs lead to the signed root"
        if not problems
        else "; ".join(problems[:5])
        + (f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""),
    )


def _read_json(path: Path, report: VerifyReport, what: str) -> Any:
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        report.add(what, False, f"{path} is missing")
    except (OSError, ValueError, RecursionError) as exc:
        report.add(what, False, f"{path} is not readable JSON: {' '.join(str(exc).split())}")
    return None


def verify_path(
    path: Path,
    key_path: Path | None = None,
    envelope_path: Path | None = None,
    witness: VerifierKey | None = None,
) -> VerifyReport:
    """Verify a directory, an envelope/bundle file (its directory), or a single proof file."""
    if path.is_dir():
        return verify_export(path, key_path, witness)
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        document = None
    if isinstance(document, dict) and ("payloadType" in document or "mediaType" in document):
        return verify_export(path.parent, key_path, witness)
    return verify_proof_file(path, key_path, envelope_path)
