"""``tpmledger prune``: archive old runs and delete their raw spans
(docs/configuration.md#retention)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from tpmledger import durations
from tpmledger.cli.database_option import add_data_dir_option, database, settings_from_args


def parse_age(text: str) -> float:
    """``30d``, ``12h``, ``2w``, ``90m`` or plain seconds → seconds (an argparse type)."""
    try:
        return durations.parse_age(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "prune",
        help="archive runs older than a duration and delete their raw spans",
        description="For each run whose newest span arrived more than DURATION ago: seal "
        "it, write its signed summary with the event file gzip-compressed under "
        "ARCHIVE_DIR/<name>-<hash of the run id>/, check that archive (signature, event "
        "file digest, minute proofs; `tpmledger summary verify DIR` recomputes every figure "
        "offline), then delete the raw spans it holds. The run stays listed, as archived, "
        "with its seals and figures; ingest refuses its new spans. A run that cannot be "
        "archived is reported and the others go on; exit 1 when one was kept "
        "(docs/configuration.md#retention, docs/operations.md#retention-and-archives).",
    )
    p.add_argument("--older-than", type=parse_age, required=True, metavar="DURATION")
    p.add_argument(
        "--archive-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where archives go (default: $TPMLEDGER_ARCHIVE_DIR, else DATA_DIR/archive)",
    )
    p.add_argument("--dry-run", action="store_true", help="say what would happen; change nothing")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    add_data_dir_option(p)
    p.set_defaults(func=run_prune)


def run_prune(args: argparse.Namespace) -> int:
    from tpmledger.analytics.proofs.run_archive import prune
    from tpmledger.provenance.signing_keys import SigningKeyError, load_or_create_signing_key
    from tpmledger.storage.server.database import role_url

    settings = settings_from_args(args)
    archive_dir = args.archive_dir or settings.archive_dir or settings.data_dir / "archive"
    try:
        key = load_or_create_signing_key(settings)
    except SigningKeyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    with database(settings, migrate_to_head=True) as url:
        report = prune(
            role_url(url, "prune"),  # bounded like the worker's (docs/operations.md)
            args.older_than,
            Path(archive_dir),
            key,
            dry_run=args.dry_run,
            say=lambda line: print(line, file=sys.stderr, flush=True),
            log_origin=settings.checkpoint_origin,
        )
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    elif not report.runs:
        print("no run is older than that; nothing to do")
    else:
        for run in report.runs:
            print(f"{run.run_id}\t{run.action}\t{run.archive_dir}")
    kept = [r for r in report.runs if r.action.startswith("kept")]
    return 1 if kept else 0
