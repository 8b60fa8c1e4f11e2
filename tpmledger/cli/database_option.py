"""Which database a command talks to: ``TPMLEDGER_DATABASE_URL`` or the embedded one.

Without ``--data-dir``, ``TPMLEDGER_DATA_DIR`` or ``TPMLEDGER_DATABASE_URL``, a command uses
the data directory of the ``tpmledger up`` that is running (``up`` records it while it
runs), so ``up --data-dir DIR`` then ``tpmledger runs`` reads DIR's database rather than
creating an empty one in the default place. Commands name the embedded database they use
on stderr.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tpmledger.settings import Settings
    from tpmledger.storage.server.embedded_postgres import EmbeddedPostgres

# storage (SQLAlchemy, psycopg, alembic) is imported when a command opens its database,
# and the settings (pydantic) when a command reads them: every `tpmledger` process builds
# the parser, `tpmledger --help` must be quick, and `summary verify` needs no database.


DATA_DIR_RULE = (
    "where the embedded PostgreSQL and signing keys live. Without it: "
    "$TPMLEDGER_DATA_DIR; else the running `tpmledger up` of the default directory "
    "(~/.local/share/tpmledger), or the only running `up` when there is one; else the "
    "default directory. A command that reads never creates a database: a directory "
    "without one is named as such. TPMLEDGER_DATABASE_URL uses an external PostgreSQL instead"
)


def add_data_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=None, help=DATA_DIR_RULE)


def running_records_dir() -> Path:
    """Where each running ``tpmledger up`` records its data directory: one file per data
    directory, so two ``up``s on two directories never overwrite each other's record."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "tpmledger" / "running"


def running_record(data_dir: Path) -> Path:
    """The record of the ``up`` serving ``data_dir`` (named by a digest of its path)."""
    key = hashlib.sha256(str(Path(data_dir).resolve()).encode()).hexdigest()[:16]
    return running_records_dir() / f"{key}.json"


def record_running(data_dir: Path) -> None:
    """Called by ``up`` once it runs (removed again by :func:`clear_running`)."""
    path = running_record(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"pid": os.getpid(), "data_dir": str(Path(data_dir).resolve())}
    path.write_text(json.dumps(record))


def clear_running(data_dir: Path) -> None:
    path = running_record(data_dir)
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def running_data_dirs() -> list[Path]:
    """The data directories of the ``tpmledger up``s that are running (stale records of
    ``up``s that died are skipped), sorted."""
    found = set()
    try:
        records = list(running_records_dir().glob("*.json"))
    except OSError:
        return []
    for path in records:
        try:
            record = json.loads(path.read_text())
            os.kill(int(record["pid"]), 0)  # still alive?
        except ProcessLookupError:
            continue
        except PermissionError:
            pass  # alive, another user's process (a shared XDG_STATE_HOME)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        found.add(Path(record["data_dir"]))
    return sorted(found)


class AmbiguousDataDir(RuntimeError):
    """Several ``up``s run, none on the default directory: the command cannot tell which."""


def running_data_dir() -> Path | None:
    """The data directory a command without ``--data-dir`` uses, from the running ``up``s:
    the one on this user's default directory, else the only one; ``None`` when none runs.
    Raises :class:`AmbiguousDataDir` naming them when several run and none is the default."""
    from tpmledger.settings import default_data_dir

    running = running_data_dirs()
    default = default_data_dir().resolve()
    if default in running or not running:
        return default if running else None
    if len(running) == 1:
        return running[0]
    listed = "\n".join(f"  {path}" for path in running)
    raise AmbiguousDataDir(
        f"several `tpmledger up` are running, none on the default data directory ({default}):\n"
        f"{listed}\nchoose one with --data-dir DIR (or TPMLEDGER_DATA_DIR), or an external "
        "database with TPMLEDGER_DATABASE_URL"
    )


def settings_from_args(
    args: argparse.Namespace, *, follow_running: bool = True, **overrides: object
) -> Settings:
    """Settings from the environment, with the command-line flags that were given on top
    (the data directory chosen by the rule in :data:`DATA_DIR_RULE`; ``up`` and ``serve``
    pass ``follow_running=False``: they start on their own directory, never another's)."""
    from tpmledger.settings import Settings

    values = {k: v for k, v in overrides.items() if v is not None}
    if getattr(args, "data_dir", None) is not None:
        values["data_dir"] = args.data_dir
    elif not follow_running:
        pass
    elif not os.environ.get("TPMLEDGER_DATA_DIR") and not os.environ.get("TPMLEDGER_DATABASE_URL"):
        try:
            running = running_data_dir()
        except AmbiguousDataDir as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
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
    settings: Settings,
    *,
    any_schema: bool = False,
    migrate_to_head: bool | None = None,
    create: bool = False,
) -> Iterator[DatabaseInUse]:
    """The configured database, or an embedded server started for the block.

    Only the embedded database is migrated automatically (brought to the newest schema).
    An external one (``TPMLEDGER_DATABASE_URL``) is checked, never changed: a schema
    behind or ahead of this code is refused with one line on stderr and exit status 2
    (docs/configuration.md#schema-migrations). ``any_schema`` skips both, for ``tpmledger
    migrate`` alone. ``migrate_to_head`` is kept for the call sites that pass it and
    changes nothing: every database is made (embedded) or checked (external) current.

    Only ``create`` (``up``, ``serve``, ``migrate``) creates an embedded database where
    there is none; every other command ends with one line naming the directory instead
    (exit status 2), so a read never leaves an empty database behind.
    """
    from tpmledger.storage.server import migrate
    from tpmledger.storage.server.database import owned_engines
    from tpmledger.storage.server.embedded_postgres import EmbeddedPostgres

    del migrate_to_head
    embedded: EmbeddedPostgres | None = None
    url = settings.database_url
    if not url:
        if not create and not EmbeddedPostgres.exists_in(settings.data_dir):
            print(no_database_message(settings.data_dir), file=sys.stderr)
            raise SystemExit(2)
        print(f"using the embedded database in {settings.data_dir}", file=sys.stderr)
        embedded = EmbeddedPostgres(settings.data_dir)
        try:
            url = embedded.start(create=create)
        except LookupError:
            embedded.stop()
            print(no_database_message(settings.data_dir), file=sys.stderr)
            raise SystemExit(2) from None
    try:
        # The command owns the engines it makes: disposed when it ends (before its server
        # stops), so no pooled connection outlives it (docs/architecture.md#database-access).
        with owned_engines():
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


def no_database_message(data_dir: Path) -> str:
    """The line a reading command ends with when ``data_dir`` holds no database."""
    lines = [
        f"error: no tpmledger database in {data_dir} (nothing was created: this command "
        "only reads). Start one there with `tpmledger up --data-dir "
        f"{data_dir}`, or choose another with --data-dir DIR or TPMLEDGER_DATABASE_URL"
    ]
    running = running_data_dirs()
    if running:
        lines.append("running `tpmledger up` data directories:")
        lines += [f"  {path}" for path in running]
    return "\n".join(lines)


@contextmanager
def database(
    settings: Settings,
    *,
    any_schema: bool = False,
    migrate_to_head: bool | None = None,
    create: bool = False,
) -> Iterator[str]:
    """Yield a database URL: the configured one, or an embedded server started for the block
    (schema and creation rules as in :func:`database_in_use`)."""
    with database_in_use(settings, any_schema=any_schema, create=create) as in_use:
        yield in_use.url
