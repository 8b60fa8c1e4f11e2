"""``tpmledger tokens create|list|revoke``: ingest bearer tokens (docs/ingest.md "Auth")."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from tpmledger.cli.database_option import add_data_dir_option, database, settings_from_args
from tpmledger.storage.time_text import minute_text


def register(subparsers: Any) -> None:
    """Add ``tokens`` with its ``create``, ``list`` and ``revoke`` subcommands."""
    tokens = subparsers.add_parser(
        "tokens",
        help="manage ingest bearer tokens (create, list, revoke)",
        description="Bearer tokens that exporters send as 'Authorization: Bearer <token>' "
        "(OTLP/HTTP) or 'authorization' metadata (OTLP/gRPC). Once any token exists, ingest "
        "and the read API refuse requests without one. Only a SHA-256 of each token is stored.",
    )
    commands = tokens.add_subparsers(dest="tokens_command", metavar="ACTION", required=True)

    p = commands.add_parser(
        "create",
        help="create a token and print it (it is shown only this once)",
        description="Create a named token and print it once; it cannot be shown again. "
        "Give it to exporters with OTEL_EXPORTER_OTLP_HEADERS='Authorization=Bearer <token>'.",
    )
    p.add_argument("name", help="a name for the token, e.g. the fleet or team using it")
    add_data_dir_option(p)
    p.set_defaults(func=run_create)

    p = commands.add_parser("list", help="list tokens (names and dates, never the tokens)")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_data_dir_option(p)
    p.set_defaults(func=run_list)

    p = commands.add_parser(
        "revoke",
        help="revoke a token by name",
        description="Revoke a token; running ingest servers stop accepting it within seconds.",
    )
    p.add_argument("name", help="name of the token to revoke")
    add_data_dir_option(p)
    p.set_defaults(func=run_revoke)


def run_create(args: argparse.Namespace) -> int:
    from tpmledger.storage.ingest_tokens import TokenNameTaken, create_token

    with database(settings_from_args(args), migrate_to_head=True) as url:
        try:
            token = create_token(url, args.name)
        except TokenNameTaken as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    print(token)
    print(
        f"token {args.name!r} created; it is shown only once. Exporters send it as\n"
        f"  OTEL_EXPORTER_OTLP_HEADERS='Authorization=Bearer <token>'",
        file=sys.stderr,
    )
    return 0


def run_list(args: argparse.Namespace) -> int:
    from tpmledger.storage.ingest_tokens import list_tokens

    with database(settings_from_args(args), migrate_to_head=True) as url:
        tokens = list_tokens(url)
    rows: list[dict[str, Any]] = [
        {
            "name": t.name,
            "created_utc": _utc(t.created_at),
            "revoked_utc": _utc(t.revoked_at) if t.revoked_at else None,
            "status": "revoked" if t.revoked_at else "active",
        }
        for t in tokens
    ]
    if args.json:
        print(json.dumps({"tokens": rows}, indent=2))
    elif not rows:
        print("no ingest tokens: ingest accepts unauthenticated spans on loopback")
    else:
        width = max(len("name"), *(len(r["name"]) for r in rows))
        print(f"{'name'.ljust(width)}  status   created_utc")
        for r in rows:
            print(f"{r['name'].ljust(width)}  {r['status'].ljust(7)}  {r['created_utc']}")
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    from tpmledger.storage.ingest_tokens import revoke_token

    with database(settings_from_args(args), migrate_to_head=True) as url:
        revoked = revoke_token(url, args.name)
    if not revoked:
        print(f"error: no active token named {args.name!r}", file=sys.stderr)
        return 1
    print(f"token {args.name!r} revoked")
    return 0


def _utc(value: datetime) -> str:
    return minute_text(value)
