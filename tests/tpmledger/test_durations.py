"""One minute in nanoseconds: ``tpmledger.durations.MINUTE_NS``, which every layer imports and
every SQL statement interpolates or binds; no module defines or spells it again."""

from __future__ import annotations

import ast
import re

from tests.package_tree import source_files
from tpmledger.durations import MINUTE_NS, SECOND_NS

#: The independent verifier recomputes everything with the standard library alone, by design
#: (docs/provenance.md): its own constants are the point.
INDEPENDENT = "tpmledger.provenance.reference"
SPELLED = re.compile(r"(?<![\d_])60_?000_?000_?000(?![\d_])")


def test_a_minute_is_sixty_seconds_of_nanoseconds() -> None:
    assert MINUTE_NS == 60 * SECOND_NS == 60_000_000_000


def _product_modules() -> list[tuple[str, str]]:
    return [
        (module, path.read_text())
        for module, path in source_files()
        if module != "tpmledger.durations" and not module.startswith(INDEPENDENT)
    ]


def test_no_module_spells_a_minute_of_nanoseconds() -> None:
    """Neither in Python nor in SQL text (a literal in a query string counts too)."""
    found = [
        f"{module}: {match.group(0)}"
        for module, source in _product_modules()
        for match in SPELLED.finditer(source)
    ]
    assert found == []


def test_no_module_defines_its_own_minute() -> None:
    found = []
    for module, source in _product_modules():
        for node in ast.walk(ast.parse(source)):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AnnAssign):
                targets = [node.target]
            names = {t.id for t in targets if isinstance(t, ast.Name)}
            if names & {"MINUTE_NS", "SECOND_NS"}:
                found.append(f"{module}:{node.lineno}")
    assert found == []


def test_the_check_sees_a_spelled_minute() -> None:
    assert SPELLED.search("SELECT end_ns / 60000000000 FROM attempts")
    assert SPELLED.search("x = 60_000_000_000")
    assert not SPELLED.search("160000000000 or 600000000000")
