"""The ``tpmledger`` command line. Each area registers its own subcommands."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class _VersionAction(argparse.Action):
    """``--version``, reading the installed version only when asked."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="show the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from tpmledger import __version__

        parser.exit(message=f"tpmledger {__version__}\n")


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
    "tpmledger.cli.witness_commands",
    "tpmledger.cli.token_commands",
    "tpmledger.cli.simulate_command",
    "tpmledger.cli.probe_command",
    "tpmledger.cli.prune_command",
)


VERBOSE_HELP = "log everything (commands are quiet otherwise)"
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tpmledger",
        description=(
            "Observability and provenance for LLM token throughput: OTLP ingest, "
            "minute-bucket TPM analytics, sealed snapshots, dashboard, signed summaries."
        ),
    )
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    subparsers = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=CommandParser
    )
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


class CommandParser(argparse.ArgumentParser):
    """The parser of every (sub)command: ``tpmledger up -v`` works like ``tpmledger -v up``.

    Nested commands' parsers are of this class too: ``add_subparsers`` makes its parsers
    of the class of the parser it is called on (argparse's documented ``parser_class``
    default), so no argparse internals are walked."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_argument(
            "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP
        )


# Libraries whose INFO lines are for debugging us, not for users: the embedded server's
# initdb/pg_ctl transcripts, each migration step, uvicorn's start-up chatter.
CHATTY_LIBRARIES = ("pgserver", "alembic", "uvicorn")


def configure_logging(command: str | None, verbose: bool) -> None:
    """Quiet by default: services log their own INFO lines, one-shot commands only
    warnings; ``-v`` shows everything, libraries' lines included."""
    from tpmledger.cli.log_lines import one_line_handler

    # One record, one line: a run id holding a newline never splits (or forges) a line.
    if verbose:
        logging.basicConfig(level=logging.DEBUG, handlers=[one_line_handler(LOG_FORMAT)])
        return
    quiet = logging.INFO if command in ("serve", "up") else logging.WARNING
    logging.basicConfig(level=quiet, handlers=[one_line_handler(LOG_FORMAT)])
    for name in CHATTY_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)


def numba_cache_dir() -> Path:
    """Where compiled analytics kernels are cached: one place for every tpmledger process
    of the user (``up``'s services inherit it, and so does every command), so a kernel
    compiled once is loaded everywhere. ``NUMBA_CACHE_DIR`` overrides it."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tpmledger" / "numba"


def main(argv: Sequence[str] | None = None) -> int:
    # Before anything imports Numba (it reads the variable once).
    os.environ.setdefault("NUMBA_CACHE_DIR", str(numba_cache_dir()))
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args.command, args.verbose)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
