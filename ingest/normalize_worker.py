"""What runs inside a normalizer worker process (:mod:`ingest.normalize_pool`).

Kept apart from the pool so that a worker imports only the normalizer and the COPY
encoder: the pool module's imports (gRPC and psycopg, through the error taxonomy) would
double a worker's memory for nothing.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Final

from tpmledger.ingest.process_memory import relax_garbage_collector
from tpmledger.ingest.request_encoding import EncodedRequest, encode_request

__all__ = ["EncodedRequest", "encode_request", "ready", "started"]

_PARENT_CHECK_S: Final = 1.0


def started(parent_pid: int) -> None:
    """Worker initializer: leave signals to the parent, and exit when the parent is gone."""
    # Ctrl-C reaches the whole process group; the main process decides when workers stop
    # (after the requests in flight are answered).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # A worker holds both ends of its task queue, so a parent killed with SIGKILL never
    # closes it: watch the parent instead, or the worker would live on as an orphan.
    threading.Thread(target=_exit_with, args=(parent_pid,), daemon=True).start()
    relax_garbage_collector()


def _exit_with(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(_PARENT_CHECK_S)
    os._exit(0)


def ready() -> int:
    """A no-op task that makes the pool start a worker; returns the worker's pid."""
    return os.getpid()
