"""``tpmledger summary checkpoint RUN [--version V]``: a sealed version's minute tree head as a
C2SP checkpoint signed with the summary key (docs/provenance.md#checkpoints)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tpmledger.cli.database_option import add_data_dir_option, database, settings_from_args

if TYPE_CHECKING:
    from tpmledger.provenance.signed_note import VerifierKey


def register_summary_actions(actions: Any) -> None:
    """Add ``summary checkpoint``."""
    checkpoint = actions.add_parser(
        "checkpoint",
        help="print a sealed version's minute tree head as a signed C2SP checkpoint",
        description="Origin <TPMLEDGER_LOG_ORIGIN or host name>/tpmledger/runs/<run id>, tree "
        "size (minutes) and base64 root, signed with the summary key; verify it with the "
        "verifier key of `tpmledger keys show --run RUN` (docs/provenance.md#checkpoints).",
    )
    checkpoint.add_argument("run_id", metavar="RUN")
    checkpoint.add_argument(
        "--version", type=int, metavar="V", help="a sealed version (default: the newest)"
    )
    checkpoint.add_argument("--out", type=Path, metavar="FILE", help="write here, not stdout")
    add_data_dir_option(checkpoint)
    checkpoint.set_defaults(func=print_checkpoint)


def print_checkpoint(args: argparse.Namespace) -> int:
    """Print (or write) the signed checkpoint; no new seal is made."""
    from tpmledger.analytics.proofs.run_log import version_checkpoint
    from tpmledger.provenance.signing_keys import SigningKeyError, load_or_create_signing_key
    from tpmledger.storage.server.database import in_one_snapshot

    settings = settings_from_args(args)
    try:
        key = load_or_create_signing_key(settings)
        with database(settings, migrate_to_head=True) as url:
            text = in_one_snapshot(
                url, version_checkpoint, args.run_id, key, settings.checkpoint_origin, args.version
            )
    except (LookupError, SigningKeyError) as exc:
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 1
    if args.out:
        args.out.write_text(text)
        print(f"{args.out}: {text.splitlines()[0]} size {text.splitlines()[1]}")
    else:
        sys.stdout.write(text)
    return 0


def key_text(value: str) -> str:
    """A key given inline or as a file holding it."""
    path = Path(value)
    if "+" not in value or path.is_file():
        try:
            return path.read_text().strip()
        except OSError as exc:
            raise ValueError(
                f"{value} is neither a key nor a readable file: {exc.strerror}"
            ) from exc
    return value.strip()


def witness_verifier(value: str) -> VerifierKey | None:
    """A witness verifier key (type 0x04) from text or a file; prints the error if bad."""
    from tpmledger.provenance.signed_note import COSIGNATURE_V1, NoteError, parse_verifier_key

    try:
        return parse_verifier_key(key_text(value), COSIGNATURE_V1)
    except (ValueError, NoteError) as exc:
        print(f"error: --witness: {exc}", file=sys.stderr)
        return None
