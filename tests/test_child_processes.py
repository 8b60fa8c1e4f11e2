"""Every child Python process the product starts runs with ``-P``.

``python -m tpmledger.x`` puts the current directory first on the child's import path. Run
from a clone of this repository (the README's first command does exactly that), the source
folder ``tpmledger/`` then shadows the installed package, and a child finds no
``tpmledger.analytics`` (the design card's folders are mapped into the package only when
installed): the analytics worker's kernel warm-up and every seal child failed so in a
non-editable install. ``-P`` (Python 3.11) leaves the current directory out.
"""

from __future__ import annotations

import ast

from tests.package_tree import source_files


def _child_commands(tree: ast.AST) -> list[tuple[int, list[ast.expr]]]:
    """The argument sequences that start with ``sys.executable``: lists and call arguments."""
    found = []
    for node in ast.walk(tree):
        items: list[ast.expr] = []
        if isinstance(node, ast.List):
            items = list(node.elts)
        elif isinstance(node, ast.Call):
            items = list(node.args)
        for at, item in enumerate(items):
            if ast.unparse(item) == "sys.executable":
                found.append((node.lineno, items[at + 1 :]))
    return found


def test_every_python_child_is_started_without_the_current_directory_on_its_path() -> None:
    missing = []
    checked = 0
    for _, path in source_files():
        for line, rest in _child_commands(ast.parse(path.read_text(encoding="utf-8"))):
            flags = [item.value for item in rest[:2] if isinstance(item, ast.Constant)]
            if "-m" in flags:
                checked += 1
                if flags[0] != "-P":
                    missing.append(f"{path}:{line}")
    assert checked >= 5
    assert missing == [], f"python -m children without -P: {missing}"
