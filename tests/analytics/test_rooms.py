"""analytics is divided into rooms by role; each may import only the rooms below it."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.package_tree import package_dir, source_files

ANALYTICS = package_dir("analytics")

# What each room may import of analytics (itself always). The worker runs live and seal.
ALLOWED = {
    "kernels": set(),
    "live": {"kernels"},
    "views": {"kernels"},
    "verdicts": {"kernels", "views"},
    "seal": {"kernels", "verdicts"},
    "proofs": {"kernels", "seal"},
}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_every_analytics_module_lives_in_a_room() -> None:
    loose = sorted(
        p.name for p in ANALYTICS.glob("*.py") if p.name not in ("__init__.py", "worker.py")
    )
    assert loose == []
    assert {p.name for p in ANALYTICS.iterdir() if (p / "__init__.py").is_file()} == set(ALLOWED)


def test_rooms_import_only_the_rooms_below_them() -> None:
    offenders: dict[str, list[str]] = {}
    for room, allowed in ALLOWED.items():
        for path in (ANALYTICS / room).rglob("*.py"):
            bad = sorted(
                name
                for name in _imports(path)
                if name.startswith("tpmledger.analytics.")
                and name.split(".")[2] not in allowed | {room}
            )
            if bad:
                offenders[str(path.relative_to(ANALYTICS))] = bad
    assert offenders == {}


def test_no_layer_below_the_cli_imports_it() -> None:
    offenders = sorted(
        module
        for module, path in source_files()
        if module.split(".")[1:2] != ["cli"]
        and any(n == "tpmledger.cli" or n.startswith("tpmledger.cli.") for n in _imports(path))
    )
    assert offenders == []
