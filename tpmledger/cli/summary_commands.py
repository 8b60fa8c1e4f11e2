"""``tpmledger summary show|export|verify|prove``: signed run summaries (docs/provenance.md,
docs/metrics.md).

``verify`` never touches a database: it checks an export directory (or one proof file)
with nothing but the files and a public key.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpmledger.cli import checkpoint_commands, consistency_commands
from tpmledger.cli.database_option import add_data_dir_option, database, settings_from_args

if TYPE_CHECKING:
    from tpmledger.analytics.proofs.summary_export import RunSummary
    from tpmledger.provenance.summary_verify import VerifyReport

# Handlers import analytics and provenance when they run: every `tpmledger` process builds
# this parser, and `serve ingest` must not carry Polars and Arrow for commands it never runs.


def register(subparsers: Any) -> None:
    """Add ``summary show|export|verify|prove|prove-consistency|verify-consistency``."""
    summary = subparsers.add_parser(
        "summary",
        help="signed run summaries: show, export, verify offline, prove a minute",
        description="DSSE-signed in-toto statements over a run's sealed figures and event file.",
    )
    actions = summary.add_subparsers(dest="summary_command", metavar="ACTION", required=True)

    show = actions.add_parser("show", help="print the human summary block of a run")
    show.add_argument("run_id", metavar="RUN")
    show.add_argument("--json", action="store_true", help="print the signed predicate as JSON")
    add_data_dir_option(show)
    show.set_defaults(func=show_summary)

    export = actions.add_parser(
        "export",
        help="write events.jsonl, the signed summary, key and minute proofs to a directory",
    )
    export.add_argument("run_id", metavar="RUN")
    export.add_argument("--out", type=Path, required=True, metavar="DIR", help="output folder")
    export.add_argument(
        "--version",
        type=int,
        metavar="V",
        help="export sealed version V (a checkpoint, say) instead of sealing and exporting "
        "the newest (docs/provenance.md#versions)",
    )
    export.add_argument(
        "--tiles",
        action="store_true",
        help="also write the minute tree as C2SP tiles under DIR/tile, so DIR served by any "
        "web server is a static log beside its checkpoint (docs/provenance.md#tiles)",
    )
    add_data_dir_option(export)
    export.set_defaults(func=export_summary)

    verify = actions.add_parser(
        "verify",
        help="verify an export directory or a single proof file, offline",
        description="Checks the signature, the events digest, every predicate figure "
        "recomputed from events.jsonl, and every minute proof. Exits 1 on any failure.",
    )
    verify.add_argument("path", type=Path, metavar="DIR|FILE")
    verify.add_argument(
        "--key", type=Path, metavar="PEM", help="trusted public key (default: service.pub beside)"
    )
    verify.add_argument(
        "--envelope", type=Path, metavar="FILE", help="envelope for a proof file without one"
    )
    verify.add_argument(
        "--witness",
        metavar="VKEY",
        help="require a valid cosignature by this witness (verifier key text, or a file "
        "holding it) on DIR/checkpoint (docs/provenance.md#witnessing)",
    )
    verify.add_argument("--json", action="store_true", help="print the checks as JSON")
    verify.set_defaults(func=verify_summary)

    prove = actions.add_parser(
        "prove", help="one minute's figures with its inclusion proof and the signed envelope"
    )
    prove.add_argument("run_id", metavar="RUN")
    prove.add_argument(
        "--minute", required=True, metavar="TIME", help="UTC minute, e.g. 2026-02-01T03:44:00Z"
    )
    prove.add_argument("--out", type=Path, metavar="FILE", help="write here instead of stdout")
    add_data_dir_option(prove)
    prove.set_defaults(func=prove_minute)

    consistency_commands.register(actions)
    checkpoint_commands.register_summary_actions(actions)


# A run still receiving spans can change between sealing and reading its events.
SEAL_ATTEMPTS = 3


def _summary(args: argparse.Namespace, events_to: Path | None = None) -> RunSummary | None:
    """Seal the run if it changed (a no-op otherwise), then build its signed summary; the
    event file streams to ``events_to`` (or is only hashed)."""
    from tpmledger.analytics.kernels.run_span_limit import RunTooLong
    from tpmledger.analytics.proofs.summary_export import SnapshotOutdated, build_summary
    from tpmledger.analytics.seal.run_computation import in_seal_view
    from tpmledger.analytics.seal.seal_process import SealFailed, seal_in_own_process
    from tpmledger.provenance.signing_keys import SigningKeyError, load_or_create_signing_key

    settings = settings_from_args(args)
    version = getattr(args, "version", None)
    try:
        key = load_or_create_signing_key(settings)
        with database(settings, migrate_to_head=True) as url:
            if version is not None:  # an earlier version as it was sealed: no new seal
                return in_seal_view(
                    url,
                    build_summary,
                    args.run_id,
                    key,
                    version,
                    log_origin=settings.checkpoint_origin,
                    events_to=events_to,
                )
            for attempt in range(1, SEAL_ATTEMPTS + 1):
                # Sealed and quiet: export that version without recomputing the run.
                # A seal runs in a process of its own: this one only streams the file.
                seal_in_own_process(url, args.run_id, even_if_current=attempt > 1)
                try:
                    return in_seal_view(
                        url,
                        build_summary,
                        args.run_id,
                        key,
                        log_origin=settings.checkpoint_origin,
                        events_to=events_to,
                    )
                except SnapshotOutdated:
                    if attempt == SEAL_ATTEMPTS:
                        raise
    except (LookupError, SnapshotOutdated, SigningKeyError, RunTooLong) as exc:
        print(f"error: {_message(exc)}", file=sys.stderr)
    except SealFailed as exc:
        print(f"error: {exc.message}", file=sys.stderr)
    return None


def _message(exc: Exception) -> str:
    # KeyError-style LookupErrors quote their message; show it plainly.
    return str(exc.args[0]) if exc.args else str(exc)


def show_summary(args: argparse.Namespace) -> int:
    """Print the human block (or the predicate as JSON) of the newest sealed snapshot."""
    from tpmledger.analytics.proofs.summary_export import snapshot_predicate
    from tpmledger.provenance.signing_keys import SigningKeyError, load_or_create_signing_key
    from tpmledger.provenance.summary_text import summary_text
    from tpmledger.storage.server.database import in_one_snapshot

    settings = settings_from_args(args)
    try:
        fingerprint = load_or_create_signing_key(settings).fingerprint
        with database(settings, migrate_to_head=True) as url:
            predicate = in_one_snapshot(url, snapshot_predicate, args.run_id)
    except (LookupError, SigningKeyError) as exc:
        print(f"error: {_message(exc)}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(predicate, indent=2))
    else:
        print(summary_text(predicate, fingerprint), end="")
    return 0


def export_summary(args: argparse.Namespace) -> int:
    """Write the export directory."""
    from tpmledger.analytics.proofs.summary_export import write_export

    events = args.out / "events.jsonl"
    summary = _summary(args, events_to=events)
    if summary is None:
        events.unlink(missing_ok=True)  # a file that does not match a signed summary
        return 1
    print(events)
    for path in write_export(summary, args.out, tiles=args.tiles):
        print(path)
    print(f"verify with: tpmledger summary verify {args.out} --key {args.out / 'service.pub'}")
    return 0


def prove_minute(args: argparse.Namespace) -> int:
    """Write one minute's leaf, inclusion proof and the signed envelope."""
    from tpmledger.provenance.minute_proofs import ProofError, single_proof

    summary = _summary(args)
    if summary is None:
        return 1
    try:
        proof = single_proof(summary.minute_proofs, args.minute, summary.envelope)
    except ProofError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(proof, indent=2) + "\n"
    if args.out:
        args.out.write_text(text)
        print(f"{args.out}: minute {proof['leaf']['minute_utc']} of run {summary.run_id}")
    else:
        sys.stdout.write(text)
    return 0


def verify_summary(args: argparse.Namespace) -> int:
    """Run every offline check; exit 0 only if all pass."""
    from tpmledger.provenance.summary_verify import verify_path

    if not args.path.exists():
        print(f"error: {args.path} does not exist", file=sys.stderr)
        return 2
    key = _key_path(args.key, args.path)
    if args.key is not None and key is None:
        print(
            f"error: key {args.key} not found: --key is a path from the current directory "
            f"({Path.cwd()}), and {args.path} holds no file of that name either",
            file=sys.stderr,
        )
        return 2
    witness = None
    if args.witness is not None:
        witness = checkpoint_commands.witness_verifier(args.witness)
        if witness is None:
            return 2
        if not args.path.is_dir():
            print(
                "error: --witness checks DIR/checkpoint: give an export directory", file=sys.stderr
            )
            return 2
    report = verify_path(args.path, key, args.envelope, witness)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        _print_report(report)
    return 0 if report.ok else 1


def _key_path(key: Path | None, target: Path) -> Path | None:
    """``--key`` as given when it exists from here, else the same name inside the export
    directory (``summary verify DIR --key service.pub`` run from DIR's parent)."""
    if key is None or key.is_file():
        return key
    folder = target if target.is_dir() else target.parent
    beside = folder / key.name
    return beside if beside.is_file() else None


def _print_report(report: VerifyReport) -> None:
    for check in report.checks:
        print(f"{'PASS' if check.ok else 'FAIL'}  {check.name}: {check.detail}")
    failed = [c.name for c in report.checks if not c.ok]
    print("verified" if report.ok else f"NOT verified: {', '.join(failed) or 'nothing checked'}")
