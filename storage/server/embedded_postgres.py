"""The embedded PostgreSQL used when ``TPMLEDGER_DATABASE_URL`` is not set.

It is a real PostgreSQL server from the ``pgserver`` wheel, kept under
``<data_dir>/postgres`` and reached over a Unix socket; it works as root too (the server
then runs as a system user ``pgserver``, which the wheel creates on first use).
``tpmledger up`` watches it with :meth:`EmbeddedPostgres.is_running` and starts it again
with :meth:`EmbeddedPostgres.restart` if it dies (first ending the dead server's orphaned
backends, which would keep its shared memory in use).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DATABASE_NAME = "tpmledger"


#: Longest runtime folder whose socket path pgserver can bind: a Unix socket path holds at
#: most 107 bytes, and pgserver adds ``/python_PostgresServer/<10 hex>/.s.PGSQL.5432``.
_RUNTIME_MAX = 107 - len("/python_PostgresServer/0123456789/.s.PGSQL.5432")


def runtime_dir(data_dir: Path) -> Path:
    """Where the server's socket lives: ``<data dir>/run``, or, when that path is too long
    for a Unix socket, a short folder of this user's named by the data directory."""
    own = Path(data_dir).resolve() / "run"
    if len(str(own).encode()) <= _RUNTIME_MAX:
        return own
    tag = hashlib.sha256(str(own).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"tpmledger-{os.getuid()}" / tag


class EmbeddedPostgresError(RuntimeError):
    """The embedded server could not be started again."""


class EmbeddedPostgres:
    """Start (or reuse) the embedded server; ``stop()`` shuts it down cleanly."""

    def __init__(self, data_dir: Path) -> None:
        self.pgdata = Path(data_dir) / "postgres"
        self._server: Any = None

    @staticmethod
    def exists_in(data_dir: Path) -> bool:
        """True when ``data_dir`` holds an embedded server's files (``initdb`` has run)."""
        return (Path(data_dir) / "postgres" / "PG_VERSION").is_file()

    def start(self, *, create: bool = True) -> str:
        """Start the server if needed and return the URL of the tpmledger database. With
        ``create=False`` a missing tpmledger database raises :class:`LookupError` (the
        server is left started: call :meth:`stop`)."""
        os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime_dir(self.pgdata.parent)))
        Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
        import pgserver  # imported lazily: it is only needed for the embedded mode

        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        log.info("starting embedded PostgreSQL in %s", self.pgdata)
        self._server = pgserver.get_server(self.pgdata, cleanup_mode="stop")
        exists = self._server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}';")
        if "1 row" not in exists:
            if not create:
                raise LookupError(f"no database {DATABASE_NAME} in {self.pgdata}")
            self._server.psql(f"CREATE DATABASE {DATABASE_NAME};")
        return str(self._server.get_uri(DATABASE_NAME))

    def is_running(self) -> bool:
        """True while the postmaster this object started (or restarted) is alive."""
        import psutil

        if self._server is None:
            return False
        process = self._server.get_postmaster_info().process
        try:
            # is_running() compares start times, so a reused pid does not count.
            return bool(
                process is not None
                and process.is_running()
                and process.status() != psutil.STATUS_ZOMBIE
            )
        except psutil.Error:
            return False

    def restart(self) -> None:
        """Start the server again on the same data directory and socket, so the URL that
        :meth:`start` returned works again. Raises :class:`EmbeddedPostgresError` when
        PostgreSQL refuses (e.g. backends of the dead server still hold its shared memory:
        they leave within moments, so the caller retries later)."""
        from pgserver._commands import POSTGRES_BIN_PATH
        from pgserver.utils import PostmasterInfo

        info = self._server.get_postmaster_info()
        if info.process is not None and info.process.is_running():
            # Killed but not yet reaped (a zombie): PostgreSQL would refuse its lock file.
            raise EmbeddedPostgresError(f"its old process {info.process.pid} has not exited yet")
        # Backends of the dead postmaster (a long query still running) hold its shared
        # memory, and PostgreSQL refuses to start until they are gone. They are this
        # server's own: end them.
        end_orphaned_backends(self.pgdata)
        socket = f"-k {info.socket_dir}" if info.socket_dir is not None else ""
        log_file = self.pgdata / "log"
        log_start = log_file.stat().st_size if log_file.exists() else 0
        command = [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(self.pgdata), "-w"]
        command += ["-o", '-h ""', "-o", socket, "-l", str(log_file), "start"]
        # stdout to /dev/null: the server inherits pg_ctl's stdout, so a pipe would never end.
        with tempfile.TemporaryFile("w+") as errors:
            try:
                subprocess.run(
                    command,
                    check=True,
                    stdout=subprocess.DEVNULL,
                    stderr=errors,
                    user=self._server.system_user,
                    timeout=120,
                )
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
                errors.seek(0)
                reason = errors.read().strip().splitlines()
                last = _last_line(log_file, log_start) or (reason[-1] if reason else str(exc))
                raise EmbeddedPostgresError(f"PostgreSQL did not start: {last}") from exc
        restarted = PostmasterInfo.read_from_pgdata(self.pgdata)
        if restarted is None or not restarted.is_running():
            raise EmbeddedPostgresError("PostgreSQL did not start: no running postmaster")
        # The wheel stops the postmaster it knows when the last user exits: tell it this one.
        self._server._postmaster_info = restarted
        log.info("embedded PostgreSQL restarted (pid %d)", restarted.pid)

    def stop(self) -> None:
        """Stop the server unless another live process still uses it. Processes that
        used it and died without saying so (a killed ``tpmledger prune``) do not count:
        otherwise the server would be left running after ``up`` stops."""
        if self._server is not None:
            log.info("stopping embedded PostgreSQL")
            _forget_dead_users(self._server.global_process_id_list)
            self._server.cleanup()
            self._server = None


def _forget_dead_users(users: Any) -> None:
    """Drop the pids of processes that are gone from pgserver's list of the server's users."""
    import psutil

    for pid in users.get():
        if pid == os.getpid():
            continue
        try:
            alive = psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            alive = False
        if not alive:
            users.get_and_remove(pid)


def end_orphaned_backends(pgdata: Path, wait_s: float = 10.0) -> list[int]:
    """End the PostgreSQL processes left running in ``pgdata`` after their postmaster
    died: asked to stop (SIGTERM cancels a query and exits), killed after ``wait_s``.
    A backend's working directory is its data directory, which is how they are found.
    Returns their pids."""
    import psutil

    target = str(Path(pgdata).resolve())
    orphans = []
    for process in psutil.process_iter(["pid", "name"]):
        try:
            if process.pid != os.getpid() and process.cwd() == target:
                orphans.append(process)
        except psutil.Error:
            continue
    if not orphans:
        return []
    log.warning(
        "ending %d PostgreSQL process(es) left by the dead server: %s",
        len(orphans),
        ", ".join(str(p.pid) for p in orphans),
    )
    for process in orphans:
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(orphans, timeout=wait_s)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=wait_s)
    return [p.pid for p in orphans]


def _last_line(path: Path, start: int = 0) -> str | None:
    """The last non-empty line the server logged from byte ``start`` on (what PostgreSQL
    said when refusing this start, not what the dead server said last)."""
    try:
        with path.open("rb") as log_file:
            log_file.seek(start)
            text = log_file.read().decode(errors="replace")
    except OSError:
        return None
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else None


# The one place the rest of the project reaches pgserver: `tpmledger up` through
# EmbeddedPostgres, the test fixtures and the benchmarks through these two.


def throwaway_server(data_dir: Path) -> Any:
    """A PostgreSQL server of the ``pgserver`` wheel in ``data_dir``, deleted by its
    ``cleanup()`` (tests and benchmarks). The result answers ``get_uri(db)``, ``psql(sql)``,
    ``get_postmaster_info()`` and ``ensure_postgres_running()``."""
    import pgserver

    return pgserver.get_server(data_dir, cleanup_mode="delete")


def remove_throwaway_server(server: Any) -> None:
    """``server.cleanup()`` of a :func:`throwaway_server`, also when its postmaster exits
    while being stopped: ``pgserver`` then signals a process that is gone and raises
    ``psutil.NoSuchProcess`` before deleting the data directory (seen once in CI, after a
    test had stopped and restarted its server)."""
    import psutil

    try:
        server.cleanup()
    except psutil.NoSuchProcess:
        shutil.rmtree(server.pgdata, ignore_errors=True)


def pg_ctl(server: Any, *args: str) -> None:
    """``pg_ctl ARGS`` on ``server``'s data directory, as the user the server runs as
    (``pgserver`` when root); raises ``subprocess.CalledProcessError`` when it fails."""
    from pgserver._commands import pg_ctl as run_pg_ctl  # type: ignore[attr-defined]

    run_pg_ctl(list(args), pgdata=server.pgdata, user=server.system_user)
