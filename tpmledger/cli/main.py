"""The ``tpmledger`` command line. Each area registers its own subcommands."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from tpmledger import __version__

# Modules that contribute subcommands; each defines ``register(subparsers)`` and sets
# ``func`` (args -> exit code) on every parser it adds.
COMMAND_MODULES: tuple[str, ...] = (
    "tpmledger.cli.up_command",
    "tpmledger.cli.serve_command",
    "tpmledger.cli.database_commands",
    "tpmledger.cli.analytics_commands",
    "tpmledger.cli.compare_command",
    "tpmledger.cli.summary_commands",
    "tpmledger.cli.key_commands",
    "tpmledger.cli.token_commands",
    "tpmledger.cli.simulate_command",
    "tpmledger.cli.probe_command",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tpmledger",
        description=(
            "Observability and provenance for LLM token throughput: OTLP ingest, "
            "minute-bucket TPM analytics, sealed snapshots, dashboard, signed summaries."
        ),
    )
    parser.add_argument("--version", action="version", version=f"tpmledger {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log everything (commands are quiet otherwise)"
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # Services log what they do; one-shot commands stay quiet unless something is wrong
    # (-v shows everything).
    quiet = logging.INFO if args.command in ("serve", "up") else logging.WARNING
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else quiet,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
