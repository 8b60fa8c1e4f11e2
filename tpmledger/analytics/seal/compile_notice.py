"""Say so when a command waits for analytics kernels to compile (the first run only).

Kernels are compiled on first use and then loaded from the on-disk cache
(``NUMBA_CACHE_DIR``, shared by every tpmledger process of the user). Loading takes a
fraction of a second; compiling takes several, silently. A command that is about to use
them warms them first, and if that takes more than a second it prints one line on stderr.
"""

from __future__ import annotations

import sys
import threading

from tpmledger.analytics.seal.kernel_warmup import warm

NOTICE_AFTER_S = 1.0
NOTICE = "compiling the analytics kernels (first run only; later runs load them from the cache)…"


def ensure_kernels() -> float:
    """Warm the kernels, with a notice on stderr if it takes longer than a second."""
    timer = threading.Timer(NOTICE_AFTER_S, lambda: print(NOTICE, file=sys.stderr, flush=True))
    timer.daemon = True
    timer.start()
    try:
        return warm()
    finally:
        timer.cancel()
