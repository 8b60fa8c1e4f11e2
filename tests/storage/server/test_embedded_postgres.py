"""The one adapter to the pgserver wheel: a throwaway server that pg_ctl stops and starts."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import psycopg
import pytest

from tpmledger.storage.server.embedded_postgres import pg_ctl, throwaway_server


@pytest.mark.slow
def test_a_throwaway_server_answers_stops_and_starts_again(tmp_path: Path) -> None:
    runtime = tmp_path / "xdg-runtime"
    runtime.mkdir(mode=0o700)
    os.environ.setdefault("XDG_RUNTIME_DIR", str(runtime))
    server = throwaway_server(tmp_path / "pg")
    try:
        url = str(server.get_uri("postgres"))
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        pg_ctl(server, "-w", "-m", "fast", "stop")
        with pytest.raises(subprocess.CalledProcessError):
            pg_ctl(server, "status")  # pg_ctl says "no server running" with exit code 3
        server.ensure_postgres_running()
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 2").fetchone() == (2,)
    finally:
        server.cleanup()


def test_a_long_data_dir_still_gets_a_socket_path_that_fits(tmp_path: Path) -> None:
    from tpmledger.storage.server.embedded_postgres import _RUNTIME_MAX, runtime_dir

    short = tmp_path / "d"
    assert runtime_dir(short) == short.resolve() / "run" or len(str(tmp_path)) > _RUNTIME_MAX - 6
    deep = tmp_path / ("a-rather-long-folder-name-" * 4) / "data"
    chosen = runtime_dir(deep)
    assert len(str(chosen).encode()) <= _RUNTIME_MAX
    assert runtime_dir(deep) == chosen  # the same folder every time for one data dir
    assert runtime_dir(deep / "other") != chosen
