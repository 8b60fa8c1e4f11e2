"""Which database a command talks to: ``TPMLEDGER_DATABASE_URL`` or the embedded one.

Without ``--data-dir``, ``TPMLEDGER_DATA_DIR`` or ``TPMLEDGER_DATABASE_URL``, a command uses
the data directory of the ``tpmledger up`` that is running (``up`` records it while it
runs), so ``up --data-dir DIR`` then ``tpmledger runs`` reads DIR's database rather than
creating an empty one in the default place. Commands name the embedded database they use
on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tpmledger.settings import Settings

if TYPE_CHECKING:
    from tpmledger.storage.embedded_postgres import EmbeddedPostgres

# storage (SQLAlchemy, psycopg, alembic) is imported when a command opens its database:
# every `tpmledger` process builds the parser, and `summary verify` needs no database.


def add_data_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="where the embedded PostgreSQL and signing keys live "
        "(default: $TPMLEDGER_DATA_DIR or ~/.local/share/tpmledger)",
    )


def running_record() -> Path:
    """Where a running ``tpmledger up`` records its data directory."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "tpmledger" / "up.json"


def record_running(data_dir: Path) -> None:
    """Called by ``up`` once it runs (removed again by :func:`clear_running`)."""
    path = running_record()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"pid": os.getpid(), "data_dir": str(data_dir.resolve())}))


def clear_running() -> None:
    path = running_record()
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def running_data_dir() -> Path | None:
    """The data directory of the ``tpmledger up`` that is running, if one is."""
    try:
        record = json.loads(running_record().read_text())
        os.kill(int(record["pid"]), 0)  # still alive?
        return Path(record["data_dir"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def settings_from_args(args: argparse.Namespace, **overrides: object) -> Settings:
    """Settings from the environment, with the command-line flags that were given on top."""
    values = {k: v for k, v in overrides.items() if v is not None}
    if getattr(args, "data_dir", None) is not None:
        values["data_dir"] = args.data_dir
    elif not os.environ.get("TPMLEDGER_DATA_DIR") and not os.environ.get("TPMLEDGER_DATABASE_URL"):
        running = running_data_dir()
        if running is not None:
            values["data_dir"] = running
    return Settings(**values)  # type: ignore[arg-type]


@dataclass(frozen=True)
class DatabaseInUse:
    """The URL a command uses, and the embedded server behind it (``None``: external)."""

    url: str
    embedded: EmbeddedPostgres | None


@contextmanager
def database_in_use(
    settings: Settings, *, any_schema: bool = False, migrate_to_head: bool | None = None
) -> Iterator[DatabaseInUse]:
    """The configured database, or an embedded server started for the block.

    Only the embedded database is migrated automatically (brought to the newest schema).
    An external one (``TPMLEDGER_DATABASE_URL``) is checked, never changed: a schema
    behind or ahead of this code is refused with one line on stderr and exit status 2
    (docs/configuration.md#schema-migrations). ``any_schema`` skips both, for ``tpmledger
    migrate`` alone. ``migrate_to_head`` is kept for the call sites that pass it and
    changes nothing: every database is made (embedded) or checked (external) current.
    """
    from tpmledger.storage import migrate
    from tpmledger.storage.embedded_postgres import EmbeddedPostgres

    del migrate_to_head
    embedded: EmbeddedPostgres | None = None
    url = settings.database_url
    if not url:
        print(f"using the embedded database in {settings.data_dir}", file=sys.stderr)
        embedded = EmbeddedPostgres(settings.data_dir)
        url = embedded.start()
    try:
        if not any_schema:
            try:
                if embedded is not None and not migrate.is_ahead(url):
                    migrate.upgrade(url)  # ours alone: it follows the code
                else:
                    migrate.check_schema(url)
            except migrate.SchemaMismatch as exc:
                print(f"error: {exc}", file=sys.stderr)
                raise SystemExit(2) from None
        yield DatabaseInUse(url, embedded)
    finally:
        if embedded is not None:
            embedded.stop()


@contextmanager
def database(
    settings: Settings, *, any_schema: bool = False, migrate_to_head: bool | None = None
) -> Iterator[str]:
    """Yield a database URL: the configured one, or an embedded server started for the block
    (schema rule as in :func:`database_in_use`)."""
    with database_in_use(settings, any_schema=any_schema) as in_use:
        yield in_use.url
