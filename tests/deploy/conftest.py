"""A Docker engine for the compose tests (started and stopped again when none was running),
and which deploy tests failed, so the compose stack fixture keeps its logs then."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "compose-local.sh"

FAILED = pytest.StashKey[list[str]]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    report = yield
    if report.failed:  # type: ignore[attr-defined]
        item.session.stash.setdefault(FAILED, []).append(item.nodeid)
    return report


def docker_available() -> bool:
    if not shutil.which("docker"):
        return False
    engine = subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0
    return engine or (shutil.which("dockerd") is not None and os.geteuid() == 0)


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[None]:
    """A running dockerd for the session; the one compose-local.sh starts is stopped after."""
    if not docker_available():
        pytest.skip("no Docker engine here and none can be started (docker.io, as root)")
    start = subprocess.run(
        ["bash", str(SCRIPT), "dockerd"], capture_output=True, text=True, timeout=120
    )
    assert start.returncode == 0, start.stderr
    yield
    if "started it" in start.stderr:
        subprocess.run(["bash", str(SCRIPT), "stop-dockerd"], capture_output=True, timeout=120)
