"""``tpmledger migrate`` and ``tpmledger runs``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tpmledger.cli.database_option import add_data_dir_option, database, settings_from_args


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "migrate",
        help="bring the database schema to the newest version",
        description="Run the Alembic migrations against TPMLEDGER_DATABASE_URL "
        "(or the embedded PostgreSQL). Safe to run again. The only command that changes an "
        "external database's schema: every other command and service refuses a schema "
        "behind or ahead of its code (docs/configuration.md#schema-migrations).",
    )
    add_data_dir_option(p)
    p.add_argument("--revision", default="head", help="target revision (default: head)")
    p.add_argument(
        "--distributed",
        action="store_true",
        help="the database is a Citus coordinator: create the citus extension if missing and "
        "distribute the tables (done anyway when the extension is there; "
        "docs/operations.md#scaling-out)",
    )
    p.set_defaults(func=run_migrate)

    p = subparsers.add_parser(
        "runs",
        help="list runs with attempts, shards, first/last event and latest seal",
        description="A table of every run tpmledger has received spans for.",
    )
    add_data_dir_option(p)
    p.add_argument("--json", action="store_true", help="print JSON (the /v1/runs shape)")
    p.set_defaults(func=run_runs)


def run_migrate(args: argparse.Namespace) -> int:
    from tpmledger.storage.server import migrate

    settings = settings_from_args(args)
    with database(settings, any_schema=True, create=True) as url:  # the one command that changes it
        if migrate.is_ahead(url):
            print(f"error: {migrate.schema_problem(url)}", file=sys.stderr)
            return 2
        if args.distributed:
            try:
                migrate.enable_citus(url)
            except migrate.SchemaMismatch as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
        migrate.upgrade(url, args.revision)
        print(f"database at revision {migrate.current_revision(url)}")
        if migrate.is_at_head(url):
            roles = migrate.distribute(url)
            if roles:
                counts = {
                    role: sum(1 for r in roles.values() if r == role)
                    for role in set(roles.values())
                }
                print(
                    f"citus: {counts.get('distributed', 0)} distributed tables, "
                    f"{counts.get('reference', 0)} reference tables"
                )
    return 0


def run_runs(args: argparse.Namespace) -> int:
    from tpmledger.analytics.views.run_views import run_list
    from tpmledger.storage.server.database import read_view
    from tpmledger.storage.writers.retention_store import stored_bytes

    settings = settings_from_args(args)
    with database(settings) as url, read_view(url) as session:
        runs = run_list(session)
        if args.json:
            sizes = stored_bytes(session)
            for run in runs:
                run["stored_bytes"] = sizes.get(run["run_id"], 0)
    if args.json:
        print(json.dumps({"runs": runs}, indent=2))
        return 0
    if not runs:
        print("no runs yet: point an OTLP exporter at tpmledger (see `tpmledger up`)")
        return 0
    header = (
        "run_id", "status", "attempts", "shards", "first_event_utc", "last_event_utc", "seal",
    )  # fmt: skip
    rows = [
        (
            r["run_id"],
            r["status"],
            str(r["attempts"]),
            str(r["shard_count"]),
            r["first_event_utc"] or "",
            r["last_event_utc"] or "",
            (r["latest_seal"] or "not sealed")[:12],
        )
        for r in runs
    ]
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    print("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)))
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
    return 0
