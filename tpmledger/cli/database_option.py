"""Which database a command talks to: ``TPMLEDGER_DATABASE_URL`` or the embedded one."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from storage import migrate
from storage.embedded_postgres import EmbeddedPostgres
from tpmledger.settings import Settings


def add_data_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the embedded PostgreSQL and signing keys live "
        "(default: $TPMLEDGER_DATA_DIR or ~/.local/share/tpmledger)",
    )


def settings_from_args(args: argparse.Namespace, **overrides: object) -> Settings:
    """Settings from the environment, with the command-line flags that were given on top."""
    values = {k: v for k, v in overrides.items() if v is not None}
    if getattr(args, "data_dir", None) is not None:
        values["data_dir"] = args.data_dir
    return Settings(**values)  # type: ignore[arg-type]


@contextmanager
def database(settings: Settings, *, migrate_to_head: bool = False) -> Iterator[str]:
    """Yield a database URL: the configured one, or an embedded server started for the block."""
    embedded: EmbeddedPostgres | None = None
    url = settings.database_url
    if not url:
        embedded = EmbeddedPostgres(settings.data_dir)
        url = embedded.start()
    try:
        if migrate_to_head:
            migrate.upgrade(url)
        yield url
    finally:
        if embedded is not None:
            embedded.stop()
