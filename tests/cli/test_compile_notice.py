"""The first command that needs the analytics kernels says it is compiling them; the next
one, in another process, loads them from the shared cache and says nothing (however long
loading takes: the notice follows Numba compiling, not a clock)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.analytics.seeding import store
from tests.storage.builders import attempt_row
from tpmledger.analytics.seal.compile_notice import NOTICE
from tpmledger.cli.main import numba_cache_dir

pytestmark = pytest.mark.slow


def test_compiling_is_announced_once_then_the_cache_is_shared(
    database_url: str, tmp_path: Path
) -> None:
    store(database_url, [attempt_row(run_id="kernels")])
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env |= {"TPMLEDGER_DATABASE_URL": database_url, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    command = [sys.executable, "-P", "-m", "tpmledger.cli.main", "analyze", "kernels"]
    first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    assert first.stderr.count(NOTICE) == 1
    assert any((tmp_path / "cache" / "tpmledger" / "numba").rglob("*.nbi"))  # the shared cache
    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr
    assert NOTICE not in second.stderr


def test_the_cache_follows_xdg_cache_home(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere")
    assert numba_cache_dir() == Path("/somewhere/tpmledger/numba")
