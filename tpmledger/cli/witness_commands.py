"""``tpmledger witness keygen|cosign``: a witness a third party runs against a tpmledger it
does not control (docs/provenance.md#witnessing).

``cosign`` needs no database and no tpmledger key: the log's verifier key, the witness's
own key, a state directory and the log's tiles (a URL prefix such as
``http://host:4318/v1/runs/RUN/`` or an exported directory).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from tpmledger.cli.checkpoint_commands import key_text

#: Bearer token sent with tile requests to a read API that requires one.
TOKEN_ENV = "TPMLEDGER_TILES_TOKEN"
EXIT_REFUSED = 1
EXIT_BAD_INPUT = 2


def register(subparsers: Any) -> None:
    """Add ``witness keygen`` and ``witness cosign``."""
    witness = subparsers.add_parser(
        "witness",
        help="cosign a run's checkpoints as an independent witness (C2SP tlog-witness)",
        description="A witness cosigns a checkpoint only if it is consistent with every "
        "checkpoint it cosigned before for the same origin (docs/provenance.md#witnessing).",
    )
    actions = witness.add_subparsers(dest="witness_command", metavar="ACTION", required=True)

    keygen = actions.add_parser(
        "keygen",
        help="create a witness key and print its verifier key",
        description="Writes PRIVATE+KEY+<name>+<key id>+<base64(0x04 ‖ seed)> (mode 0600) and "
        "prints the verifier key <name>+<key id>+<base64(0x04 ‖ public key)> to publish.",
    )
    keygen.add_argument("name", metavar="NAME", help="witness name, e.g. witness.example.com/w1")
    keygen.add_argument("--out", type=Path, required=True, metavar="FILE")
    keygen.set_defaults(func=generate_key)

    cosign = actions.add_parser(
        "cosign",
        help="check a checkpoint against the log and this witness's state, then cosign it",
        description="Checks the log's signature, then consistency with the last checkpoint "
        "this witness cosigned for the origin (a proof computed from the log's tiles), and "
        "prints the checkpoint with a cosignature/v1 line appended. Refuses (exit 1) a "
        "checkpoint that rewrites what it cosigned, naming both tree heads; exit 2 on bad "
        f"input. A read API that needs a token gets it from ${TOKEN_ENV}. "
        "See docs/provenance.md#witnessing.",
    )
    cosign.add_argument(
        "checkpoint",
        type=Path,
        metavar="CHECKPOINT_FILE",
        help="the log-signed checkpoint (GET …/checkpoint, or DIR/checkpoint of an export)",
    )
    cosign.add_argument(
        "--log-key", required=True, metavar="VKEY", help="the log's verifier key (or a file)"
    )
    cosign.add_argument(
        "--key",
        type=Path,
        required=True,
        metavar="WITNESS_KEY_FILE",
        help="this witness's private key (from keygen)",
    )
    cosign.add_argument(
        "--state",
        type=Path,
        required=True,
        metavar="DIR",
        help="where this witness keeps, per origin, the last size and root it cosigned",
    )
    cosign.add_argument(
        "--tiles",
        required=True,
        metavar="URL|DIR",
        help="the log's tiles: its URL prefix (http://host:4318/v1/runs/RUN/) or an "
        "exported directory",
    )
    cosign.add_argument(
        "--out", type=Path, metavar="FILE", help="write the cosigned checkpoint here too"
    )
    cosign.set_defaults(func=cosign_checkpoint_file)


def generate_key(args: argparse.Namespace) -> int:
    """Write a new witness key (never over an existing file) and print its verifier key."""
    from tpmledger.provenance.cosignature import generate_witness_key
    from tpmledger.provenance.signed_note import NoteError

    try:
        key = generate_witness_key(args.name)
    except NoteError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        fd = os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        print(f"error: {args.out} exists; a witness key is never overwritten", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:
        print(f"error: cannot create {args.out}: {exc.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    with os.fdopen(fd, "w") as handle:
        handle.write(key.private_text + "\n")
    print(key.verifier.text)
    return 0


def cosign_checkpoint_file(args: argparse.Namespace) -> int:
    """Cosign the checkpoint file if it is consistent with this witness's state."""
    from tpmledger.provenance.cosignature import parse_witness_key
    from tpmledger.provenance.signed_note import ED25519, NoteError, parse_verifier_key
    from tpmledger.provenance.tile_source import tile_source
    from tpmledger.provenance.tiles import TileError
    from tpmledger.provenance.witness import WitnessRefusal, cosign_checkpoint

    try:
        log_key = parse_verifier_key(key_text(args.log_key), ED25519)
        witness_key = parse_witness_key(_read(args.key, "witness key"))
        data = _read(args.checkpoint, "checkpoint")
        token = os.environ.get(TOKEN_ENV)
        tiles = tile_source(args.tiles, {"Authorization": f"Bearer {token}"} if token else None)
        cosigned = cosign_checkpoint(data, log_key, witness_key, args.state, tiles)
    except WitnessRefusal as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return EXIT_REFUSED
    except (NoteError, TileError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.out:
        args.out.write_text(cosigned.note)
    sys.stdout.write(cosigned.note)
    return 0


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the {what} {path}: {exc}") from exc
