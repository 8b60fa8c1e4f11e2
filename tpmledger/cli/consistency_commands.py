"""``tpmledger summary prove-consistency|verify-consistency``.

See docs/provenance.md#consistency-proofs.

``prove-consistency`` reads two sealed versions' stored minute leaves and prints the RFC
9162 proof that the later minute tree extends the earlier one, or refuses (exit 1) naming
the minutes that changed. ``verify-consistency`` checks such a file offline; with the two
versions' signed summaries it also checks that the roots are the signed ones.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tpmledger.cli.database_option import add_data_dir_option, database, settings_from_args

EXIT_REFUSED = 1


def register(actions: Any) -> None:
    """Add the two actions to ``tpmledger summary``."""
    prove = actions.add_parser(
        "prove-consistency",
        help="prove that a later sealed version extends an earlier one (RFC 9162)",
        description="Prints {run_id, from, to, proof}: the minute Merkle tree of version TO "
        "extends that of version FROM, so figures published from FROM still stand in TO. "
        "Refused, naming the minutes, when late data changed a minute FROM already held.",
    )
    prove.add_argument("run_id", metavar="RUN")
    prove.add_argument("--from", dest="old", type=int, required=True, metavar="A")
    prove.add_argument("--to", dest="new", type=int, required=True, metavar="B")
    prove.add_argument("--out", type=Path, metavar="FILE", help="write here instead of stdout")
    add_data_dir_option(prove)
    prove.set_defaults(func=prove_consistency)

    verify = actions.add_parser(
        "verify-consistency",
        help="verify a consistency proof file offline against the two signed summaries",
        description="Verifies the signature of each version's signed summary (summary.dsse.json, "
        "summary.sigstore.json, or the export directory) first, then that the file's run id, "
        "versions, tree sizes and roots are exactly the signed ones, then the proof. The "
        "proof alone cannot tell a forged size or run id from the real one, so both summaries "
        "are required unless --unsigned asks for the proof arithmetic only "
        "(docs/provenance.md#consistency-proofs).",
    )
    verify.add_argument("path", type=Path, metavar="FILE")
    verify.add_argument("--from-summary", type=Path, metavar="ENVELOPE")
    verify.add_argument("--to-summary", type=Path, metavar="ENVELOPE")
    verify.add_argument(
        "--key",
        type=Path,
        action="append",
        metavar="PEM",
        help="trusted public key, repeatable (default: service.pub beside each summary)",
    )
    verify.add_argument(
        "--unsigned",
        action="store_true",
        help="check only that the proof holds for the sizes and roots the file claims "
        "(nothing ties them to a signed summary)",
    )
    verify.set_defaults(func=verify_consistency_file)


def prove_consistency(args: argparse.Namespace) -> int:
    from tpmledger.analytics.proofs.version_consistency import ConsistencyRefused, prove_consistency
    from tpmledger.storage.server.database import in_one_snapshot

    with database(settings_from_args(args), migrate_to_head=True) as url:
        try:
            document = in_one_snapshot(url, prove_consistency, args.run_id, args.old, args.new)
        except ConsistencyRefused as exc:
            print(f"refused: {exc}", file=sys.stderr)
            return EXIT_REFUSED
    text = json.dumps(document, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def verify_consistency_file(args: argparse.Namespace) -> int:
    """Signatures first, then every claimed field against the signed one, then the proof."""
    from tpmledger.provenance.consistency_document import (
        ConsistencyDocumentError,
        check_against_signed,
        parse_document,
        proof_problem,
    )

    document = _read_json(args.path)
    if isinstance(document, str):
        return _fail(document, code=2)
    try:
        claim = parse_document(document)
    except ConsistencyDocumentError as exc:
        return _fail(f"{args.path} is not a consistency-proof document: {exc}")
    summaries = {"from": args.from_summary, "to": args.to_summary}
    if not args.unsigned and None in summaries.values():
        return _fail(
            "the sizes and roots in a proof file are not signed: pass --from-summary and "
            "--to-summary (each version's summary.dsse.json), or --unsigned to check only "
            "the proof arithmetic",
            code=2,
        )
    fingerprints: set[str] = set()
    if not args.unsigned:
        for side, path in summaries.items():
            signed = _signed_head(path, args.key)
            if isinstance(signed, str):
                return _fail(f"the {side!r} summary {path}: {signed}")
            problem = check_against_signed(claim, side, signed)
            if problem:
                return _fail(problem)
            fingerprints.add(signed.key_fingerprint[:16])
    problem = proof_problem(claim)
    if problem:
        return _fail(problem)
    old, new = claim.old, claim.new
    heads = (
        f"version {new.version} of {_shown(claim.run_id)} ({new.tree_size} minutes, root "
        f"{new.merkle_root}) extends version {old.version} ({old.tree_size} minutes, root "
        f"{old.merkle_root})"
    )
    if args.unsigned:
        print(
            f"UNSIGNED: the proof holds if {heads}; nothing ties these sizes, roots or labels "
            "to a signed summary"
        )
    else:
        print(f"OK: {heads}; both signed by key {', '.join(sorted(fingerprints))}")
    return 0


def _signed_head(path: Path, keys: list[Path] | None) -> Any:
    """The verified ``SignedTreeHead`` of an envelope, bundle or export directory, or a
    one-line reason it cannot be had."""
    from tpmledger.provenance.consistency_document import (
        ConsistencyDocumentError,
        signed_tree_head,
    )
    from tpmledger.provenance.signing_keys import SigningKeyError, load_public_key_pem
    from tpmledger.provenance.sigstore_bundle import BundleError, envelope_from_bundle

    if path.is_dir():
        path = path / "summary.dsse.json"
    envelope = _read_json(path)
    if isinstance(envelope, str):
        return envelope
    if isinstance(envelope, dict) and "mediaType" in envelope:
        try:
            envelope = envelope_from_bundle(envelope)
        except BundleError as exc:
            return str(exc)
    key_files = keys or [path.parent / "service.pub"]
    trusted = []
    for key_file in key_files:
        try:
            trusted.append(load_public_key_pem(key_file.read_bytes()))
        except (OSError, ValueError, SigningKeyError) as exc:
            return f"cannot load the public key {key_file}: {_one_line(exc)} (pin one with --key)"
    try:
        return signed_tree_head(envelope, trusted)
    except ConsistencyDocumentError as exc:
        return str(exc)


def _read_json(path: Path) -> Any:
    """The parsed JSON of ``path``, or a one-line reason (a ``str``) it cannot be read."""
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        return f"{path} does not exist"
    except (OSError, ValueError, RecursionError) as exc:
        return f"cannot read {path} as JSON: {_one_line(exc)}"


def _fail(message: str, *, code: int = EXIT_REFUSED) -> int:
    print(
        f"FAILED: {_one_line(message)}" if code == EXIT_REFUSED else f"error: {message}",
        file=sys.stdout if code == EXIT_REFUSED else sys.stderr,
    )
    return code


def _one_line(value: object) -> str:
    return " ".join(str(value).split())


def _shown(text: str) -> str:
    """A user value (run id) printed on one line: control characters escaped."""
    return text if text.isprintable() else json.dumps(text, ensure_ascii=False)
