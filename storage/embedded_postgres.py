"""The embedded PostgreSQL used when ``TPMLEDGER_DATABASE_URL`` is not set.

It is a real PostgreSQL server from the ``pgserver`` wheel, kept under
``<data_dir>/postgres`` and reached over a Unix socket; it works as root too.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DATABASE_NAME = "tpmledger"


class EmbeddedPostgres:
    """Start (or reuse) the embedded server; ``stop()`` shuts it down cleanly."""

    def __init__(self, data_dir: Path) -> None:
        self.pgdata = Path(data_dir) / "postgres"
        self._server: Any = None

    def start(self) -> str:
        """Start the server if needed and return the URL of the tpmledger database."""
        os.environ.setdefault("XDG_RUNTIME_DIR", str(self.pgdata.parent / "run"))
        Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
        import pgserver  # imported lazily: it is only needed for the embedded mode

        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        log.info("starting embedded PostgreSQL in %s", self.pgdata)
        self._server = pgserver.get_server(self.pgdata, cleanup_mode="stop")
        exists = self._server.psql(f"SELECT 1 FROM pg_database WHERE datname = '{DATABASE_NAME}';")
        if "1 row" not in exists:
            self._server.psql(f"CREATE DATABASE {DATABASE_NAME};")
        return str(self._server.get_uri(DATABASE_NAME))

    def stop(self) -> None:
        if self._server is not None:
            log.info("stopping embedded PostgreSQL")
            self._server.cleanup()
            self._server = None
