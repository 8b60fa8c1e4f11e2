"""Every run-level figure has one formula, registered here once (docs/architecture.md#one-formula).

A figure function is declared with :func:`figure`; declaring a second function under a name
already taken fails at import. The seal, the live run object and the read side call the same
registered functions with the rows they hold, so live and sealed figures differ only in
their rows. :func:`recording` lets a test see which registered figures a path computed,
which is how the test suite proves that the paths share them
(``tests/analytics/kernels/test_figure_registry.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Final, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

#: name → the one function that computes it.
FIGURES: Final[dict[str, Callable[..., Any]]] = {}

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
            return function(*args, **kwargs)

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
