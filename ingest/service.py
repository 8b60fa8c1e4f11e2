"""``tpmledger serve ingest``: OTLP/HTTP and OTLP/gRPC in one process and event loop.

Both listeners share one :class:`~ingest.group_commit.GroupCommitWriter`, so requests
from either transport are committed together, and one
:class:`~ingest.normalize_pool.NormalizePool`, whose worker processes do the CPU work.
On SIGTERM/SIGINT the listeners stop accepting, requests in flight finish, the queue is
flushed to the database, the workers stop, and the process exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
from collections.abc import Iterator

import uvicorn

from tpmledger.ingest.auth import TokenVerifier
from tpmledger.ingest.body_budget import BodyBudget
from tpmledger.ingest.export_handler import TraceExportHandler
from tpmledger.ingest.group_commit import GroupCommitWriter
from tpmledger.ingest.grpc_server import (
    CallQueue,
    SignalServices,
    TraceService,
    build_grpc_server,
)
from tpmledger.ingest.http_app import build_app
from tpmledger.ingest.http_protocol import bounded_read_protocol
from tpmledger.ingest.metrics import IngestMetrics
from tpmledger.ingest.normalize_pool import NormalizePool, default_workers
from tpmledger.ingest.other_signals import OtherSignals
from tpmledger.ingest.process_memory import limit_heap_retention, relax_garbage_collector
from tpmledger.ingest.server_scraper import ServerScraper
from tpmledger.settings import Settings
from tpmledger.storage.server.database import owned_engines

log = logging.getLogger(__name__)

_GRACE_S = 15.0
# Writer connections draining the queue. Two helped while normalizing ran in this process
# (~6,000 → ~7,400 spans/s); with normalizer workers one is as fast and cheaper: bigger
# groups, fewer threads contending for this process's GIL (bench/ingest_alone.py, 500k spans,
# alternating: 16.7k/17.0k spans/s with one, 16.6k/17.3k with two; CPU-projected 23.8-24.0k
# vs 22.3-22.9k).
WRITER_CONNECTIONS = 1


class _HttpServer(uvicorn.Server):
    """uvicorn without its own signal handling: :func:`serve` owns SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def run(settings: Settings) -> None:
    """Run ingest until SIGTERM/SIGINT (``settings.database_url`` must be set)."""
    limit_heap_retention()  # before any thread starts: arenas are per thread
    relax_garbage_collector()
    asyncio.run(serve(settings))


async def serve(settings: Settings, stop: asyncio.Event | None = None) -> None:
    """Serve both listeners until ``stop`` is set or a signal arrives; then drain and return.
    The service owns the engines it makes: they are disposed when it stops."""
    if not settings.database_url:
        raise ValueError("ingest needs settings.database_url")
    with owned_engines():
        await _serve(settings, settings.database_url, stop)


async def _serve(settings: Settings, url: str, stop: asyncio.Event | None) -> None:
    loop = asyncio.get_running_loop()
    stop = stop or asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)

    metrics = IngestMetrics()
    verifier = TokenVerifier(url, settings.ingest_tokens, read_tokens=settings.read_tokens)
    try:
        await asyncio.to_thread(verifier.load)
    except Exception as exc:  # start anyway: /readyz reports the database, writes get 503
        log.warning("database not reachable at start (%s); tokens load later", type(exc).__name__)
    settings.check_bind_is_safe(has_tokens=verifier.required)

    writer = GroupCommitWriter(
        url,
        max_queue_spans=settings.queue_max_spans,
        max_commit_spans=settings.commit_max_spans,
        retry_after_s=settings.retry_after_s,
        metrics=metrics,
        connections=WRITER_CONNECTIONS,
    )
    writer.start()
    workers = settings.normalize_workers
    pool = NormalizePool(
        default_workers() if workers is None else workers, keep_content=settings.store_content
    )
    pool.start()
    for cache in ("attributes", "plans"):
        metrics.cache_bytes.labels(cache).set_function(functools.partial(pool.cache_bytes, cache))
    handler = TraceExportHandler(writer, metrics, pool.encode, writer.internal_errors)
    # Both transports draw on it.
    bodies = BodyBudget(settings.body_budget_bytes, retry_after_s=settings.retry_after_s)
    app = build_app(
        handler,
        database_url=url,
        verifier=verifier,
        metrics=metrics,
        settings=settings,
        bodies=bodies,
    )
    http = _HttpServer(
        uvicorn.Config(
            app,
            host=settings.host,
            port=settings.http_port,
            http=bounded_read_protocol(),
            log_config=None,
            access_log=False,  # per-request lines cost throughput; /metrics counts answers
            server_header=False,
            timeout_graceful_shutdown=int(_GRACE_S),
        )
    )
    # One queue of turns for the three gRPC services (ingest/grpc_server.py).
    calls = CallQueue(retry_after_s=settings.retry_after_s)
    signals = SignalServices(OtherSignals(url, metrics), verifier, metrics, bodies, calls)
    grpc_server = build_grpc_server(
        TraceService(handler, verifier, metrics, bodies, calls),
        settings.host,
        settings.grpc_port,
        signals,
    )
    await grpc_server.start()
    # Server endpoints are read in threads of their own: a hanging one never slows ingest.
    scraper = ServerScraper(
        url,
        settings.scrape_targets,
        interval_s=settings.scrape_interval_s,
        timeout_s=settings.scrape_timeout_s,
    )
    if settings.scrape_targets:
        metrics.add_collector(scraper.collector())
        scraper.start()
    http_task = asyncio.create_task(http.serve(), name="http")
    refresh_task = asyncio.create_task(verifier.refresh_forever(), name="token-refresh")
    # The start line on stdout, as the dashboard's: it is news for the user, not a log line.
    print(
        f"ingest listening: OTLP/HTTP and the read API on {settings.host}:{settings.http_port}, "
        f"OTLP/gRPC on {settings.host}:{settings.grpc_port}",
        flush=True,
    )
    stop_task = asyncio.create_task(stop.wait(), name="stop")
    try:
        await asyncio.wait({stop_task, http_task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        log.info("ingest stopping: no new requests, flushing the queue")
        http.should_exit = True
        scraper.stop()
        refresh_task.cancel()
        stop_task.cancel()
        # Both listeners stop accepting; requests in flight still get their commit.
        await asyncio.gather(http_task, grpc_server.stop(_GRACE_S), return_exceptions=True)
        await writer.close()
        await pool.close()
        log.info("ingest stopped")
    if http_task.done() and not http_task.cancelled() and http_task.exception():
        raise RuntimeError("the HTTP listener failed") from http_task.exception()
    if not http.started:
        raise RuntimeError(f"could not start OTLP/HTTP on {settings.host}:{settings.http_port}")
