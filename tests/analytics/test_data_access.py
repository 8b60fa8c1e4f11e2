"""One data-access convention below the entry points (docs/architecture.md#data-access):
only an entry point takes a database URL (and so opens, and owns, what it connects); every
other analytics function takes what its caller opened (a ``SealView``, a session, a
connection). The allow-list names each entry point and why it takes a URL, and each says
so in its docstring ("Takes a URL: …")."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.package_tree import source_files

#: What a database URL parameter is called.
URL_NAMES = frozenset({"url", "database_url", "db_url", "dsn", "conninfo"})

#: Analytics functions that take a URL ("module:qualified name"), and why.
ENTRY_POINTS = {
    "tpmledger.analytics.seal.sealing:seal_run": "an entry point: opens the seal's view, "
    "then the transaction that stores the version",
    "tpmledger.analytics.seal.sealing:seal_unless_current": "an entry point (exports, "
    "archives, the seal's child process)",
    "tpmledger.analytics.seal.run_computation:seal_view": "opens a view: what entry points call",
    "tpmledger.analytics.seal.run_computation:in_seal_view": "opens a view: what entry points call",
    "tpmledger.analytics.seal.run_computation:compute_run": "a test and bench helper",
    "tpmledger.analytics.seal.run_computation:load_run": "a test and bench helper (its "
    "split fetch connects a second backend)",
    "tpmledger.analytics.proofs.run_events:load_run_events": "a test helper",
    "tpmledger.analytics.seal.seal_process:seal_in_own_process": "a child-process launcher",
    "tpmledger.analytics.seal.seal_process:seal_run_in_child": "a child-process launcher",
    "tpmledger.analytics.seal.seal_process:_run_child": "passes the URL to the child",
    "tpmledger.analytics.seal.seal_process:_seal": "the child's call of the entry points",
    "tpmledger.analytics.proofs.event_file_process:EventFileProcess.__init__": "a "
    "child-process launcher",
    "tpmledger.analytics.proofs.run_archive:prune": "an entry point (tpmledger prune, the "
    "worker's prune loop)",
    "tpmledger.analytics.proofs.run_archive:_prune_locked": "prune's per-run steps",
    "tpmledger.analytics.proofs.run_archive:_archive_or_keep": "prune's per-run steps",
    "tpmledger.analytics.proofs.run_archive:_archive": "prune's per-run steps",
    "tpmledger.analytics.proofs.run_archive:_verified_folder": "prune's per-run steps",
    "tpmledger.analytics.proofs.run_archive:_delete": "prune's per-run steps",
    "tpmledger.analytics.worker:ResealLoop.__init__": "a worker loop",
}


def url_takers(source: str, module: str) -> dict[str, str | None]:
    """Every function of ``source`` that takes a URL parameter, as ``module:qualified
    name``, with its docstring."""
    found: dict[str, str | None] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                arguments = child.args
                names = [
                    a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)
                ]
                if any(n in URL_NAMES or n.endswith("_url") for n in names):
                    found[f"{module}:{prefix}{child.name}"] = ast.get_docstring(child)
                visit(child, f"{prefix}{child.name}.<locals>.")

    visit(ast.parse(source), "")
    return found


def _analytics_url_takers() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for module, path in source_files():
        if module.startswith("tpmledger.analytics"):
            found |= url_takers(Path(path).read_text(), module)
    return found


def test_only_entry_points_take_a_database_url() -> None:
    found = _analytics_url_takers()
    unexpected = sorted(set(found) - set(ENTRY_POINTS))
    assert not unexpected, (
        f"these analytics functions take a database URL: {unexpected}; take the caller's "
        "view/session/connection instead, or (an entry point) add it to ENTRY_POINTS with "
        "its reason (docs/architecture.md#data-access)"
    )
    stale = sorted(set(ENTRY_POINTS) - set(found))
    assert not stale, f"ENTRY_POINTS names functions that no longer take a URL: {stale}"


def test_each_entry_point_says_why_it_takes_a_url() -> None:
    found = _analytics_url_takers()
    silent = sorted(name for name in ENTRY_POINTS if "Takes a URL" not in (found[name] or ""))
    assert not silent, f"say why in the docstring ('Takes a URL: …'): {silent}"


def test_the_guard_sees_functions_methods_and_keyword_parameters() -> None:
    """The checker itself, on a made-up module: it must catch what the guard forbids."""
    source = """
def reads(view, run_id): ...
def opens(database_url, run_id): ...
class Loader:
    def __init__(self, session): ...
    def load(self, run_id, *, split_url=None): ...
async def fetch(run_id, url): ...
def outer(view):
    def inner(dsn): ...
"""
    assert set(url_takers(source, "m")) == {
        "m:opens",
        "m:Loader.load",
        "m:fetch",
        "m:outer.<locals>.inner",
    }
