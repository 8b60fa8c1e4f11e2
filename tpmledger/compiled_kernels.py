"""Whether this process may call its compiled (Numba) kernels without waiting for them.

A kernel not yet in Numba's on-disk cache compiles on its first call: seconds to a
minute on a busy machine. The analytics worker fills the cache in a child process at
start (:func:`analytics.worker.warm_in_child`) and, until that child is done, says so
here: the live path then uses the kernels' plain implementations (same results, slower
per value; the first minutes of a run are small), so a run's first live figures never
wait for a compilation (docs/metrics.md#live-figures). Every other process calls the
kernels at once (compiling on first use, or loading them from the cache).
"""

from __future__ import annotations

import threading

_ready = threading.Event()
_ready.set()


def kernels_ready() -> bool:
    """True unless this process is still waiting for its kernels to be compiled."""
    return _ready.is_set()


def compiling() -> None:
    """From now until :func:`ready`, callers use the plain implementations."""
    _ready.clear()


def ready() -> None:
    _ready.set()
