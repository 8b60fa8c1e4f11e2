"""tpmledger.provenance is a leaf library: it imports no other package of the project, and it (with
the offline verifier) loads and runs where the server's dependencies are missing."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from tests.analytics.golden_events import golden_records
from tests.package_tree import subpackages
from tpmledger.analytics.proofs.summary_export import summary_from_events, write_export
from tpmledger.provenance.event_schema import EVENT_SCHEMA
from tpmledger.provenance.signing_keys import SigningKey

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tpmledger"
PROVENANCE = PACKAGE / "provenance"
# Every package of the project but provenance itself, by its full import name.
SIBLINGS = sorted(f"tpmledger.{name}" for name in subpackages() if name != "provenance")
# What the verifier must run without (server and fast-path dependencies).
SERVER_ONLY = ("sqlalchemy", "psycopg", "numba", "alembic", "fastapi", "pgserver")

_BLOCKER = """
import importlib.abc, importlib, json, sys
blocked = set(json.loads(sys.argv[1]))
class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in blocked):
            raise ImportError(f"{name} is blocked in this test")
        return None
sys.meta_path.insert(0, Blocked())
"""


def provenance_modules() -> list[str]:
    return sorted(
        ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for path in PROVENANCE.rglob("*.py")
    )


def imported_names(path: Path) -> set[str]:
    """Every module ``path`` imports, at any depth of the file, by its full name."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def sibling_imports(path: Path) -> list[str]:
    """The project packages other than provenance that ``path`` imports."""
    return sorted(
        name
        for name in imported_names(path)
        if any(name == s or name.startswith(s + ".") for s in SIBLINGS)
    )


def run_blocked(blocked: list[str], code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _BLOCKER + code, json.dumps(blocked), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_scan_sees_every_sibling_package() -> None:
    expected = {"analytics", "storage", "cli", "ingest", "read_api", "dashboard"}
    assert {f"tpmledger.{name}" for name in expected} <= set(SIBLINGS)
    assert "tpmledger.provenance.reference.run_tally" in provenance_modules()


def test_no_provenance_module_imports_a_sibling_package() -> None:
    offenders = {
        str(path.relative_to(ROOT)): sibling_imports(path) for path in PROVENANCE.rglob("*.py")
    }
    assert {path: names for path, names in offenders.items() if names} == {}


@pytest.mark.slow
def test_every_provenance_module_imports_with_siblings_and_server_packages_blocked() -> None:
    code = """
import importlib
for name in sys.argv[2:]:
    importlib.import_module(name)
print(sorted(m for m in sys.modules if m.startswith("tpmledger.provenance")))
"""
    modules = provenance_modules()
    result = run_blocked([*SIBLINGS, *SERVER_ONLY], code, *modules)
    assert result.returncode == 0, result.stderr
    assert set(modules) <= set(ast.literal_eval(result.stdout))


def test_the_blocker_really_blocks() -> None:
    result = run_blocked(["numba"], "import tpmledger.provenance.line_writer as w; w._compiled()")
    assert result.returncode != 0
    assert "numba is blocked in this test" in result.stderr


def _golden_export(directory: Path) -> None:
    """A signed export of the golden run, built in memory, written to ``directory``."""
    events = pl.DataFrame(golden_records(), schema=EVENT_SCHEMA)
    key = SigningKey(Ed25519PrivateKey.generate(), directory.parent / "k")
    summary = summary_from_events(
        events, key, run_id="golden", computed_at="2026-02-01T04:00:00.000Z"
    )
    write_export(summary, directory)


def test_an_export_verifies_with_numba_sqlalchemy_psycopg_and_polars_unavailable(
    tmp_path: Path,
) -> None:
    _golden_export(tmp_path / "export")
    code = """
from pathlib import Path
from tpmledger.provenance.summary_verify import verify_export
report = verify_export(Path(sys.argv[2]))
print(json.dumps(report.as_dict()))
print(",".join(m for m in ("polars", "numpy", "pyarrow", "numba") if m in sys.modules))
"""
    blocked = [*SIBLINGS, *SERVER_ONLY, "polars", "numpy", "pyarrow"]
    result = run_blocked(blocked, code, str(tmp_path / "export"))
    assert result.returncode == 0, result.stderr
    report_line, loaded = result.stdout.splitlines()
    report = json.loads(report_line)
    assert report["ok"], report["checks"]
    assert len(report["checks"]) == 11  # … SUMMARY.txt and the export's checkpoint
    assert loaded == ""


def test_the_summary_verify_command_runs_without_database_drivers_or_numba(
    tmp_path: Path,
) -> None:
    # The command line builds every command's parser; none may load a database driver.
    _golden_export(tmp_path / "export")
    code = """
from tpmledger.cli.main import main
code = main(["summary", "verify", sys.argv[2]])
print(code, ",".join(m for m in ("sqlalchemy", "psycopg", "numba") if m in sys.modules))
"""
    blocked = ["sqlalchemy", "psycopg", "numba", "alembic", "pgserver"]
    result = run_blocked(blocked, code, str(tmp_path / "export"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "0 ", result.stdout
