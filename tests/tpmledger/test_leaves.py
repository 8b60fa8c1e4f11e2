"""The leaves every layer may import (settings, durations, slo, token_scopes) import nothing
of the project but each other (docs/architecture.md)."""

from __future__ import annotations

import ast

import pytest

from tests.package_tree import source_files

LEAVES = {
    "tpmledger.settings",
    "tpmledger.durations",
    "tpmledger.slo",
    "tpmledger.token_scopes",
    "tpmledger.error_classes",
    "tpmledger.host_names",
}


def _project_imports(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {name for name in names if name == "tpmledger" or name.startswith("tpmledger.")}


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_a_leaf_imports_only_leaves(leaf: str) -> None:
    (path,) = [path for module, path in source_files() if module == leaf]
    assert _project_imports(path.read_text()) <= LEAVES - {leaf}
