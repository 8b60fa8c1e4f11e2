"""``tpmledger tokens create|list|revoke``: bearer tokens with a scope, ``ingest`` or
``read`` (docs/ingest.md#token-scopes)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from typing import Any

from tpmledger.cli.database_option import add_data_dir_option, database, settings_from_args
from tpmledger.storage.codecs.time_text import minute_text


def register(subparsers: Any) -> None:
    """Add ``tokens`` with its ``create``, ``list`` and ``revoke`` subcommands."""
    tokens = subparsers.add_parser(
        "tokens",
        help="manage bearer tokens (create, list, revoke)",
        description="Bearer tokens of scope 'ingest' (exporters send them as 'Authorization: "
        "Bearer <token>' over OTLP/HTTP or 'authorization' metadata over OTLP/gRPC) or "
        "'read' (the read API, the dashboard, /metrics). A token of one scope cannot use the "
        "other. Once any token exists, ingest, the read API and the dashboard refuse "
        "requests without one. Only a SHA-256 of each token is stored "
        "(docs/ingest.md#token-scopes).",
    )
    commands = tokens.add_subparsers(dest="tokens_command", metavar="ACTION", required=True)

    p = commands.add_parser(
        "create",
        help="create a token and print it (it is shown only this once)",
        description="Create a named token and print it once; it cannot be shown again. "
        "An ingest token goes to exporters (OTEL_EXPORTER_OTLP_HEADERS='Authorization=Bearer "
        "<token>'); a read token to people and tools that read (the dashboard's "
        "/?token=<token> login, the read API, Prometheus scraping /metrics).",
    )
    p.add_argument("name", help="a name for the token, e.g. the fleet or team using it")
    p.add_argument(
        "--scope",
        choices=("ingest", "read"),
        default="ingest",
        help="ingest: write spans, metrics and logs; read: the read API, the dashboard and "
        "/metrics (default: ingest)",
    )
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
    from tpmledger.storage.writers.ingest_tokens import TokenNameTaken, create_token

    with database(settings_from_args(args), migrate_to_head=True) as url:
        try:
            token = create_token(url, args.name, args.scope)
        except TokenNameTaken as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    print(token)
    use = (
        "Exporters send it as\n  OTEL_EXPORTER_OTLP_HEADERS='Authorization=Bearer <token>'"
        if args.scope == "ingest"
        else "Open the dashboard once at /?token=<token>, or send 'Authorization: Bearer "
        "<token>' to the read API and /metrics"
    )
    print(
        f"{args.scope} token {args.name!r} created; it is shown only once. {use}",
        file=sys.stderr,
    )
    return 0


def run_list(args: argparse.Namespace) -> int:
    from tpmledger.storage.server.database import in_one_snapshot
    from tpmledger.storage.writers.ingest_tokens import list_tokens

    with database(settings_from_args(args), migrate_to_head=True) as url:
        tokens = in_one_snapshot(url, list_tokens)
    rows: list[dict[str, Any]] = [
        {
            "name": t.name,
            "created_utc": _utc(t.created_at),
            "revoked_utc": _utc(t.revoked_at) if t.revoked_at else None,
            "status": "revoked" if t.revoked_at else "active",
            # Tokens created before scopes ("all") keep both.
            "scopes": ["ingest", "read"] if t.scope == "all" else [t.scope],
        }
        for t in tokens
    ]
    if args.json:
        print(json.dumps({"tokens": rows}, indent=2))
    elif not rows:
        print("no tokens: ingest and the dashboard are open (on loopback only)")
    else:
        width = max(len("name"), *(len(r["name"]) for r in rows))
        print(f"{'name'.ljust(width)}  status   {'scopes'.ljust(11)}  created_utc")
        for r in rows:
            scopes = ",".join(r["scopes"])
            print(
                f"{r['name'].ljust(width)}  {r['status'].ljust(7)}  {scopes.ljust(11)}  "
                f"{r['created_utc']}"
            )
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    from tpmledger.storage.writers.ingest_tokens import revoke_token

    with database(settings_from_args(args), migrate_to_head=True) as url:
        revoked = revoke_token(url, args.name)
    if not revoked:
        print(f"error: no active token named {args.name!r}", file=sys.stderr)
        return 1
    print(f"token {args.name!r} revoked")
    return 0


def _utc(value: datetime) -> str:
    return minute_text(value)
