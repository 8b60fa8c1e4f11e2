"""Normalize export requests in worker processes, so ingest uses every core.

Normalizing and encoding a request (:func:`ingest.request_encoding.encode_request`) is
pure-Python CPU work: in the listener's process it holds the GIL, so one ingest process
could use one core while the machine has more (bench/ingest_alone.py: the normalizer, not
PostgreSQL, was the limit). :class:`NormalizePool` runs it in ``workers`` spawned
processes instead. A request crosses as one ``bytes`` object and comes back as one COPY
text block, so the hand-over costs a copy, not a per-span conversion. The listeners, the
group commit and ``/metrics`` stay in the main process, and its event loop stays free
to answer ``/healthz`` while the workers are busy.

``workers=0`` normalizes inline (in the event loop's thread), as a fallback and for
small deployments. If a worker process dies, the requests it held are answered 503 +
Retry-After (:class:`~ingest.error_taxonomy.NormalizerLost`) and a new pool starts.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from tpmledger.ingest import normalize_worker
from tpmledger.ingest.error_taxonomy import NormalizerLost
from tpmledger.ingest.request_encoding import EncodedRequest, encode_request

log = logging.getLogger(__name__)

_RETRY_AFTER_S = 1


def default_workers() -> int:
    """One normalizer process per core (1 to 8). On the 2-core benchmark machine, with
    PostgreSQL on the same host, 2 workers beat 1 when the machine was otherwise idle
    (bench/ingest_alone.py: 20.4k vs 17.7k and 18.3k vs 13.2k durable spans/s) and tied under
    other load; 3 were no faster. A worker costs about 31 MiB."""
    return max(1, min(8, len(os.sched_getaffinity(0))))


class NormalizePool:
    """``encode_request`` in ``workers`` processes (or inline when ``workers`` is 0).

    ``keep_content`` is ``TPMLEDGER_STORE_CONTENT`` (docs/configuration.md#message-content).
    """

    def __init__(self, workers: int, keep_content: bool = False) -> None:
        self.workers = max(0, workers)
        self.keep_content = keep_content
        self._executor: ProcessPoolExecutor | None = None
        # pid → {cache: bytes} as each process last reported (ingest/normalize.py).
        self._cache_bytes: dict[int, dict[str, int]] = {}

    def cache_bytes(self, cache: str) -> int:
        """Bytes ``cache`` holds across the normalizing processes, as last reported."""
        return sum(sizes.get(cache, 0) for sizes in self._cache_bytes.values())

    def _noted(self, encoded: EncodedRequest) -> EncodedRequest:
        self._cache_bytes[encoded.pid] = encoded.cache_bytes
        return encoded

    def start(self) -> None:
        """Spawn the worker processes now, so the first requests do not wait for them."""
        if self.workers and self._executor is None:
            self._executor = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=normalize_worker.started,
                initargs=(os.getpid(),),
            )
            for _ in range(self.workers):
                self._executor.submit(normalize_worker.ready)

    async def encode(self, payload: bytes | bytearray) -> EncodedRequest:
        """Normalize and encode one serialized export request.

        Raises what :func:`encode_request` raises (``DecodeError`` for a bad body), or
        :class:`NormalizerLost` when the worker died.
        """
        if not self.workers:
            return self._noted(encode_request(payload, self.keep_content))
        if self._executor is None:
            self.start()
        executor = self._executor
        assert executor is not None
        try:
            return self._noted(
                await asyncio.get_running_loop().run_in_executor(
                    executor, normalize_worker.encode_request, payload, self.keep_content
                )
            )
        except BrokenProcessPool as exc:
            self._replace(executor)
            raise NormalizerLost(
                "a normalizer process stopped; retry later", retry_after_s=_RETRY_AFTER_S
            ) from exc

    def _replace(self, broken: ProcessPoolExecutor) -> None:
        if self._executor is broken:  # only the first request to notice restarts the pool
            log.error("a normalizer worker process died; starting a new pool")
            broken.shutdown(wait=False, cancel_futures=True)
            self._executor = None
            self._cache_bytes.clear()
            self.start()

    async def close(self) -> None:
        """Let the workers finish what they hold, then stop them."""
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.to_thread(executor.shutdown, wait=True)

    def pids(self) -> list[int]:
        """Process ids of the live workers (for tests and diagnostics)."""
        executor = self._executor
        processes = getattr(executor, "_processes", None) or {}
        return sorted(processes)
