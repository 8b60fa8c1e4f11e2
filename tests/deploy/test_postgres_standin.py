"""The postgres:16 stand-in of scripts/compose-local/postgres keeps the upstream contract.

Run as a plain container: POSTGRES_USER / POSTGRES_DB, the password from a *_FILE secret,
scram-sha-256 for TCP clients, pg_isready for the healthcheck, and a restart that keeps the
data without initializing again.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.deploy.conftest import SCRIPT
from tests.fixtures.servers import wait_for

ROOT = SCRIPT.parents[1]
IMAGE = "tpmledger-local/postgres:16"
pytestmark = [pytest.mark.compose, pytest.mark.slow]


def docker(*args: str, timeout: float = 120) -> str:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"docker {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


@pytest.fixture(scope="module")
def standin_image(docker_engine: None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TPMLEDGER_")}
    # The base image (cached after the first run), then the stand-in on it.
    build = subprocess.run(
        ["bash", str(SCRIPT), "build"], env=env, capture_output=True, text=True, timeout=1800
    )
    assert build.returncode == 0, build.stderr[-4000:]
    docker("build", "-q", "-t", IMAGE, "--build-arg", "BASE_IMAGE=tpmledger-local/base:bookworm",
           str(ROOT / "scripts" / "compose-local" / "postgres"))  # fmt: skip
    return IMAGE


@pytest.fixture
def container(standin_image: str, tmp_path: Path) -> Iterator[str]:
    secret = tmp_path / "db_password"
    secret.write_text("s3cret 'quoted\" pass\n")
    name = f"tpmledger-standin-{uuid.uuid4().hex[:8]}"
    docker("run", "-d", "--name", name,
           "-v", f"{secret}:/run/secrets/db_password:ro",
           "-e", "POSTGRES_USER=alice", "-e", "POSTGRES_DB=ledger db",
           "-e", "POSTGRES_PASSWORD_FILE=/run/secrets/db_password",
           standin_image)  # fmt: skip
    try:
        yield name
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", name], capture_output=True, timeout=60)


def ready(name: str) -> bool:
    probe = ["docker", "exec", name, "pg_isready", "-U", "alice", "-d", "ledger db"]
    return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0


def connect(name: str, password: str) -> psycopg.Connection[tuple[object, ...]]:
    address = docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                     name)  # fmt: skip
    return psycopg.connect(
        host=address, user="alice", password=password, dbname="ledger db", connect_timeout=10
    )


def test_user_database_and_password_file_as_upstream(container: str) -> None:
    wait_for(lambda: ready(container), timeout=60, interval=0.5)
    with connect(container, "s3cret 'quoted\" pass") as conn:
        row = conn.execute("SELECT current_user, current_database(), rolsuper FROM pg_roles "
                           "WHERE rolname = current_user").fetchone()  # fmt: skip
        assert row == ("alice", "ledger db", True)
        conn.execute("CREATE TABLE kept (n int)")
        conn.execute("INSERT INTO kept VALUES (42)")
        conn.commit()
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        connect(container, "wrong")

    docker("restart", container)
    wait_for(lambda: ready(container), timeout=60, interval=0.5)
    with connect(container, "s3cret 'quoted\" pass") as conn:
        assert conn.execute("SELECT n FROM kept").fetchone() == (42,)
    logs = docker("logs", container)
    assert logs.count("initialized /var/lib/postgresql/data") == 1


def test_refuses_to_start_without_a_password(standin_image: str) -> None:
    run = subprocess.run(
        ["docker", "run", "--rm", "-e", "POSTGRES_USER=alice", standin_image],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1
    assert "POSTGRES_PASSWORD is not set" in run.stderr
