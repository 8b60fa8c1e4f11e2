"""``tpmledger keys show|rotate``: the Ed25519 key that signs run summaries."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tpmledger.cli.database_option import add_data_dir_option, settings_from_args

# The key code (cryptography) is imported when a command runs: `tpmledger --help` stays quick.


def register(subparsers: Any) -> None:
    """Add ``keys show`` and ``keys rotate``."""
    keys = subparsers.add_parser(
        "keys",
        help="show or rotate the summary signing key",
        description="The Ed25519 key that signs run summaries (created on first use, mode 0600).",
    )
    actions = keys.add_subparsers(dest="keys_command", metavar="ACTION", required=True)

    show = actions.add_parser(
        "show",
        help="print the public key (PEM) and its fingerprint",
        description="Print the current public key (SPKI PEM) and its fingerprint "
        "(SHA-256 of the SPKI DER); --all adds retired keys.",
    )
    add_data_dir_option(show)
    show.add_argument("--all", action="store_true", help="also print retired public keys")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.add_argument(
        "--run",
        metavar="RUN",
        help="also print the verifier key of RUN's checkpoints, "
        "<origin>+<key id>+<base64 key> (docs/provenance.md#checkpoints)",
    )
    show.set_defaults(func=show_keys)

    rotate = actions.add_parser(
        "rotate",
        help="retire the current key (public half kept) and create a new one",
        description="New summaries are signed with a fresh key; the old public key stays "
        "under keys/retired/ and is still served by GET /v1/keys.",
    )
    add_data_dir_option(rotate)
    rotate.add_argument("--json", action="store_true", help="print JSON")
    rotate.set_defaults(func=rotate_keys)


def show_keys(args: argparse.Namespace) -> int:
    from tpmledger.provenance.signing_keys import SigningKeyError, public_keys

    """Print the public key(s); creates the key on first use."""
    settings = settings_from_args(args)
    try:
        keys = public_keys(settings)
    except SigningKeyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not args.all:
        keys = keys[:1]
    origin = None
    if args.run is not None:
        from tpmledger.provenance.checkpoint import run_origin

        origin = run_origin(settings.checkpoint_origin, args.run)
    rows: list[dict[str, Any]] = []
    for k in keys:
        row: dict[str, Any] = {"fingerprint": k.fingerprint, "current": k.current, "pem": k.pem}
        if origin is not None:
            from tpmledger.provenance.checkpoint import log_verifier_key

            row["checkpoint_origin"] = origin
            row["note_verifier_key"] = log_verifier_key(origin, k.public_key)
        rows.append(row)
    if args.json:
        print(json.dumps({"keys": rows}, indent=2))
        return 0
    for row in rows:
        state = "current" if row["current"] else "retired"
        print(f"fingerprint: {row['fingerprint']} ({state}, sha256 of SPKI DER)")
        if "note_verifier_key" in row:
            print(f"verifier key: {row['note_verifier_key']}")
        print(row["pem"], end="")
    if origin is None:
        print(
            "checkpoints are signed per run (key name = the run's origin): "
            "`tpmledger keys show --run RUN` prints a run's verifier key",
            file=sys.stderr,
        )
    return 0


def rotate_keys(args: argparse.Namespace) -> int:
    from tpmledger.provenance.signing_keys import (
        SigningKeyError,
        load_or_create_signing_key,
        rotate_signing_key,
    )

    """Rotate the managed key and print both fingerprints."""
    settings = settings_from_args(args)
    try:
        old, new = rotate_signing_key(settings)
        path = load_or_create_signing_key(settings).path
    except SigningKeyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"retired": old.fingerprint, "current": new.fingerprint}))
        return 0
    print(f"retired: {old.fingerprint} (public key kept under {path.parent / 'retired'})")
    print(f"current: {new.fingerprint}")
    print(new.public_pem, end="")
    return 0
