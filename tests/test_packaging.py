"""``pip install`` puts exactly one import package into site-packages: ``tpmledger``."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _site_packages(venv: Path) -> Path:
    purelib = sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)})
    return Path(purelib)


@pytest.mark.slow
def test_the_wheel_installs_only_the_tpmledger_package(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("tpmledger-*.whl")
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    site = _site_packages(venv)
    before = {p.name for p in site.iterdir()}
    subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-index",
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    added = {p.name for p in site.iterdir()} - before
    dist_info = {name for name in added if name.endswith(".dist-info")}
    assert len(dist_info) == 1 and next(iter(dist_info)).startswith("tpmledger-")
    assert added - dist_info == {"tpmledger"}
    # The parts are inside it, with their data files.
    package = site / "tpmledger"
    for part in ("ingest", "storage", "analytics", "dashboard", "migrations", "provenance"):
        assert (package / part / "__init__.py").is_file(), part
    assert (package / "migrations" / "script.py.mako").is_file()
    assert any((package / "dashboard" / "assets").iterdir())
