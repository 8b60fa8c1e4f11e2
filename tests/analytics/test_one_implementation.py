"""One implementation per figure: the product computes the minute table and run figures
only by the streaming seal's walk (analytics/seal/run_stream.py); the whole-run pass is a
test oracle (tests/analytics/oracle/whole_run.py) and no product module defines or
imports it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.analytics.oracle import whole_run
from tests.package_tree import source_files

ROOT = Path(__file__).resolve().parents[2]

# The whole-run pass: its entry points and the parts only it used.
WHOLE_RUN = {
    "analyze_events",
    "compute_run_figures",
    "build_minute_table",
    "compute_minutes",
    "count_logical_calls",
    "minute_concurrency",
    "work_conserving",
    "run_totals",
    "_whole_run_totals",
}


def _offences(path: Path, forbidden: str = "tests") -> list[str]:
    """Whole-run definitions and imports in ``path``, and imports of ``forbidden`` modules."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in WHOLE_RUN:
            found.append(f"defines {node.name}")
        elif isinstance(node, ast.ImportFrom):
            if node.module and node.module.startswith(forbidden):
                found.append(f"imports {node.module}")
            found += [f"imports {a.name}" for a in node.names if a.name in WHOLE_RUN]
        elif isinstance(node, ast.Import):
            found += [f"imports {a.name}" for a in node.names if a.name.startswith(forbidden)]
    return found


@pytest.mark.slow
def test_no_product_module_defines_or_imports_the_whole_run_pass() -> None:
    offenders = {module: found for module, path in source_files() if (found := _offences(path))}
    assert offenders == {}


def test_the_benches_measure_the_product_not_the_oracle() -> None:
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sorted((ROOT / "bench").rglob("*.py"))
        if (found := _offences(path, forbidden="tests.analytics.oracle"))
    }
    assert offenders == {}


def test_the_oracle_holds_the_whole_run_pass() -> None:
    # The names above stay meaningful: the oracle defines every one of them.
    assert set(vars(whole_run)) >= WHOLE_RUN
