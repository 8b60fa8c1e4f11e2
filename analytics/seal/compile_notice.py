"""Say so when a command waits for analytics kernels to compile (the first run only).

Kernels are compiled on first use and then loaded from the on-disk cache
(``NUMBA_CACHE_DIR``, shared by every tpmledger process of the user). Loading takes a
fraction of a second; compiling takes several, silently. A command that is about to use
them warms them first and, when a kernel is missing from the cache (or the cache no longer
fits the code) so that Numba compiles it, prints one line on stderr as the first
compilation starts. Whether it compiles decides, not how long warming takes: a busy
machine that loads the cache slowly says nothing.
"""

from __future__ import annotations

import sys

from numba.core import event

from tpmledger.analytics.seal.kernel_warmup import warm

NOTICE = "compiling the analytics kernels (first run only; later runs load them from the cache)…"


class _FirstCompilation(event.Listener):
    """Prints :data:`NOTICE` once, when Numba starts compiling (a cache hit is no
    ``numba:compile`` event: Numba loads the cached code before it would compile)."""

    def __init__(self) -> None:
        self.announced = False

    def on_start(self, ev: event.Event) -> None:
        if not self.announced:
            self.announced = True
            print(NOTICE, file=sys.stderr, flush=True)

    def on_end(self, ev: event.Event) -> None:
        pass


def ensure_kernels() -> float:
    """Warm the kernels, with a notice on stderr if any must be compiled; returns the
    seconds warming took."""
    with event.install_listener("numba:compile", _FirstCompilation()):
        return warm()
