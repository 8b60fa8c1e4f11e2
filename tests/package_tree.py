"""Where each subpackage of ``tpmledger`` lives on disk.

The design card's parts (``ingest/``, ``storage/``, ``analytics/``, ``dashboard/``,
``migrations/``) stand at the repository root and the rest in ``tpmledger/`` (setup.py maps
them into one package), so tests that walk the source ask the import system, not the tree.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import tpmledger


def package_dir(name: str) -> Path:
    """The folder holding ``tpmledger.<name>``'s ``__init__.py``."""
    module = importlib.import_module(f"tpmledger.{name}")
    assert module.__file__ is not None
    return Path(module.__file__).resolve().parent


def subpackages() -> dict[str, Path]:
    """Every direct subpackage of ``tpmledger`` and its folder, the mapped parts included."""
    root = Path(tpmledger.__file__).resolve().parent
    names = {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}
    names |= {"ingest", "storage", "analytics", "dashboard", "migrations"}
    return {name: package_dir(name) for name in sorted(names)}


def source_files() -> Iterator[tuple[str, Path]]:
    """(full module name, path) of every module of the package."""
    root = Path(tpmledger.__file__).resolve().parent
    for path in sorted(root.glob("*.py")):
        yield ".".join(("tpmledger", path.stem)).removesuffix(".__init__"), path
    for name, folder in subpackages().items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            yield ".".join(("tpmledger", name, *parts)).removesuffix(".__init__"), path
