"""One implementation per figure: what stays true of the import graph.

That each figure has one formula, called by the seal and the live path alike, is proven by
behaviour in ``tests/analytics/kernels/test_figure_registry.py`` (a formula declared twice
is refused; each path's output changes when its registered formula is substituted), not by
a list of forbidden function names, which a twin under another name would pass. What is
left here: the whole-run pass and the window recomputation are test oracles
(``tests/analytics/oracle/``), so no product module imports the tests, and the benches
measure the product, never the oracle.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.package_tree import source_files

ROOT = Path(__file__).resolve().parents[2]


def _imports(path: Path, forbidden: str) -> list[str]:
    """Imports in ``path`` of ``forbidden`` or a module below it."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found += [f"imports {n}" for n in names if n == forbidden or n.startswith(forbidden + ".")]
    return found


@pytest.mark.slow
def test_no_product_module_imports_the_tests() -> None:
    offenders = {
        module: found for module, path in source_files() if (found := _imports(path, "tests"))
    }
    assert offenders == {}


def test_the_benches_measure_the_product_not_the_oracle() -> None:
    offenders = {
        str(path.relative_to(ROOT)): found
        for path in sorted((ROOT / "bench").rglob("*.py"))
        if (found := _imports(path, "tests.analytics.oracle"))
    }
    assert offenders == {}
