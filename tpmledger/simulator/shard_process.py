"""One shard process: ``python -m tpmledger.simulator.shard_process`` (config on stdin).

Writes JSON lines to stdout — ``{"shard": N, "final": false, "counters": {...}}`` every
``progress_every_s`` and one ``"final": true`` line after the tracer provider was flushed and
shut down, so the final ``spans_exported`` is complete. Logs go to stderr.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys

import httpx

from tpmledger.simulator.config import ShardConfig
from tpmledger.simulator.counters import ShardCounters
from tpmledger.simulator.shard_worker import ShardWorker
from tpmledger.simulator.telemetry import CountingSpanExporter, build_tracer_provider

FLUSH_TIMEOUT_MS = 60_000


def emit(config: ShardConfig, counters: ShardCounters, final: bool) -> None:
    line = {"shard": config.shard_id, "final": final, "counters": counters.to_dict()}
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


async def _report(
    config: ShardConfig,
    counters: ShardCounters,
    counting: CountingSpanExporter,
    stop: asyncio.Event,
) -> None:
    parent = os.getppid()
    while True:
        await asyncio.sleep(config.progress_every_s)
        counters.spans_exported = counting.exported
        counters.spans_export_failed = counting.failed
        emit(config, counters, final=False)
        if os.getppid() != parent:  # the fleet went away: stop like on SIGTERM
            stop.set()


async def run_shard(
    config: ShardConfig, worker: ShardWorker, counting: CountingSpanExporter
) -> None:
    """Run the worker with a real HTTP client until done or told to stop."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    reporter = asyncio.create_task(_report(config, worker.counters, counting, stop))
    cap = config.concurrency
    timeout = httpx.Timeout(config.request_timeout_s, connect=10.0)
    limits = httpx.Limits(max_connections=cap, max_keepalive_connections=cap)
    try:
        async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
            await worker.run(client, stop)
    finally:
        reporter.cancel()


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    config = ShardConfig.model_validate_json(sys.stdin.read())
    provider, counting = build_tracer_provider(config)
    counters = ShardCounters()
    worker = ShardWorker(config, provider.get_tracer("tpmledger.simulator"), counters)
    try:
        asyncio.run(run_shard(config, worker, counting))
    finally:
        # A stop request during the flush must not lose the spans being flushed.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        provider.force_flush(FLUSH_TIMEOUT_MS)
        provider.shutdown()
        counters.spans_exported = counting.exported
        counters.spans_export_failed = counting.failed
        emit(config, counters, final=True)


if __name__ == "__main__":
    main()
