"""Every run-level figure has one formula, registered here once (docs/architecture.md#one-formula).

A figure function is declared with :func:`figure`; declaring a second function under a name
already taken fails at import. The seal, the live run object and the read side call the same
registered functions with the rows they hold, so live and sealed figures differ only in
their rows. :func:`recording` lets a test see which registered figures a path computed,
and :func:`substituted` swaps a registered formula for a perturbed one while a block runs,
which is how the test suite proves that the paths share them: each path's output changes
when the one formula does (``tests/analytics/kernels/test_figure_registry.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Final, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

#: name → the one function that computes it (as called: it records, then runs the formula).
FIGURES: Final[dict[str, Callable[..., Any]]] = {}
#: name → the formula a call runs (the declared one, unless :func:`substituted`).
_FORMULAS: Final[dict[str, Callable[..., Any]]] = {}

_seen: ContextVar[set[str] | None] = ContextVar("figures_seen", default=None)


class FigureDeclaredTwice(RuntimeError):
    """A figure name given to two functions: one of them is a second formula."""


def figure(name: str) -> Callable[[F], F]:
    """Register the decorated function as *the* formula of figure ``name``."""

    def register(function: F) -> F:
        if name in FIGURES:
            taken = FIGURES[name]
            raise FigureDeclaredTwice(
                f"figure {name!r} already has a formula: {taken.__module__}.{taken.__qualname__}"
            )

        @functools.wraps(function)
        def computed(*args: Any, **kwargs: Any) -> Any:
            seen = _seen.get()
            if seen is not None:
                seen.add(name)
            return _FORMULAS[name](*args, **kwargs)

        _FORMULAS[name] = function
        FIGURES[name] = computed
        return computed  # type: ignore[return-value]

    return register


@contextmanager
def recording() -> Iterator[set[str]]:
    """The names of the registered figures computed inside the block (this thread/task)."""
    seen: set[str] = set()
    token = _seen.set(seen)
    try:
        yield seen
    finally:
        _seen.reset(token)


@contextmanager
def substituted(
    name: str, perturb: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> Iterator[None]:
    """Inside the block, every call of figure ``name`` runs ``perturb(formula)`` instead of
    its formula (every caller, whatever name it imported the function under; all threads).
    For tests: a path whose output changes under the substitution really calls the formula."""
    declared = _FORMULAS[name]
    _FORMULAS[name] = perturb(declared)
    try:
        yield
    finally:
        _FORMULAS[name] = declared
