"""Start a fleet of shard processes (and the simulated server), aggregate their counters.

Each shard is its own OS process (``simulator.shard_process``) in its own session, so a
terminal Ctrl-C reaches only this parent, which then stops the shards in order (SIGTERM:
cancel, flush spans, report) and the server last.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from tpmledger.simulator.config import Pitfalls, ServerConfig, ShardConfig, WorkloadConfig
from tpmledger.simulator.counters import ShardCounters, derived_figures, fleet_totals
from tpmledger.simulator.server_process import running_llm_server

ProgressCallback = Callable[[float, ShardCounters], None]


class FleetConfig(Pitfalls):
    """One run: ``shards`` processes at ``concurrency`` each, for ``duration_s`` seconds."""

    run_id: str
    sweep_id: str | None = None
    shards: int = Field(default=8, gt=0)
    concurrency: int = Field(default=16, gt=0)
    duration_s: float = Field(default=300.0, gt=0)
    otlp_endpoint: str
    otlp_protocol: str = Field(default="http/protobuf", pattern="^(http/protobuf|grpc)$")
    retry_backoff_s: float = Field(default=1.0, ge=0)
    max_attempts: int = Field(default=6, gt=0)
    request_timeout_s: float = Field(default=30.0, gt=0)
    seed: int = 0
    workload: WorkloadConfig = WorkloadConfig()
    server: ServerConfig = ServerConfig()
    llm_url: str | None = Field(default=None, description="use this server instead of our own")

    def shard_config(self, shard_id: int, llm_url: str) -> ShardConfig:
        return ShardConfig(
            run_id=self.run_id,
            shard_id=shard_id,
            shard_count=self.shards,
            concurrency=self.concurrency,
            sweep_id=self.sweep_id,
            duration_s=self.duration_s,
            llm_url=llm_url,
            otlp_endpoint=self.otlp_endpoint,
            otlp_protocol=self.otlp_protocol,
            retry_backoff_s=self.retry_backoff_s,
            max_attempts=self.max_attempts,
            request_timeout_s=self.request_timeout_s,
            seed=self.seed,
            workload=self.workload,
            **{name: getattr(self, name) for name in Pitfalls.model_fields},
        )


@dataclass
class FleetResult:
    """What the fleet did, from the shards' own counters."""

    config: FleetConfig
    shards: dict[int, ShardCounters] = field(default_factory=dict)
    complete: set[int] = field(default_factory=set)  # shards that sent their final report
    exit_codes: dict[int, int] = field(default_factory=dict)
    interrupted: bool = False

    @property
    def total(self) -> ShardCounters:
        return fleet_totals(list(self.shards.values()))

    def summary(self) -> dict[str, Any]:
        """The machine-readable summary (``tpmledger simulate --json``)."""
        total = self.total
        return {
            "run_id": self.config.run_id,
            "sweep_id": self.config.sweep_id,
            "shards": self.config.shards,
            "concurrency": self.config.concurrency,
            "shards_reported": len(self.complete),
            "interrupted": self.interrupted,
            "counters": total.to_dict(),
            **derived_figures(total),
        }


async def _read_reports(shard_id: int, stream: asyncio.StreamReader, result: FleetResult) -> None:
    async for raw in stream:
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        result.shards[shard_id] = ShardCounters.from_dict(line["counters"])
        if line.get("final"):
            result.complete.add(shard_id)


async def _show_progress(
    result: FleetResult, every_s: float, started: float, callback: ProgressCallback
) -> None:
    while True:
        await asyncio.sleep(every_s)
        callback(time.monotonic() - started, result.total)


async def _run_shards(
    config: FleetConfig,
    llm_url: str,
    progress: ProgressCallback | None,
    every_s: float,
    stoppers: list[Callable[[], None]] | None = None,
) -> FleetResult:
    """One fleet's shards to completion; on SIGINT/SIGTERM they are stopped. With
    ``stoppers`` (fleets run side by side), the fleet adds its stop there instead of
    taking the signals itself (a loop has one handler per signal)."""
    result = FleetResult(config=config)
    started = time.monotonic()
    procs: list[asyncio.subprocess.Process] = []
    loop = asyncio.get_running_loop()

    def stop_all() -> None:
        result.interrupted = True
        for proc in procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)

    own_signals = stoppers is None
    if stoppers is not None:
        stoppers.append(stop_all)
    else:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop_all)
    try:
        for shard_id in range(config.shards):
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-P",
                "-m",
                "tpmledger.simulator.shard_process",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                start_new_session=True,
                limit=1 << 20,
            )
            assert proc.stdin is not None
            proc.stdin.write(config.shard_config(shard_id, llm_url).model_dump_json().encode())
            await proc.stdin.drain()
            proc.stdin.close()
            procs.append(proc)
            if result.interrupted:
                stop_all()
        readers = [
            asyncio.create_task(_read_reports(i, proc.stdout, result))
            for i, proc in enumerate(procs)
            if proc.stdout is not None
        ]
        shower = (
            asyncio.create_task(_show_progress(result, every_s, started, progress))
            if progress
            else None
        )
        await asyncio.gather(*readers)
        for shard_id, proc in enumerate(procs):
            result.exit_codes[shard_id] = await proc.wait()
        if shower:
            shower.cancel()
    finally:
        if own_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
    return result


def run_fleet(
    config: FleetConfig,
    progress: ProgressCallback | None = None,
    progress_every_s: float = 5.0,
) -> FleetResult:
    """Run one fleet to completion (or until SIGINT/SIGTERM) and return its counters."""
    if config.llm_url:
        return asyncio.run(_run_shards(config, config.llm_url, progress, progress_every_s))
    with running_llm_server(config.server) as llm_url:
        return asyncio.run(_run_shards(config, llm_url, progress, progress_every_s))


async def _run_side_by_side(
    configs: list[FleetConfig],
    urls: list[str],
    progress_for: Callable[[FleetConfig], ProgressCallback | None],
    every_s: float,
) -> list[FleetResult]:
    loop = asyncio.get_running_loop()
    stoppers: list[Callable[[], None]] = []

    def stop_every_fleet() -> None:
        for stop in stoppers:
            stop()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_every_fleet)
    try:
        return list(
            await asyncio.gather(
                *(
                    _run_shards(config, url, progress_for(config), every_s, stoppers)
                    for config, url in zip(configs, urls, strict=True)
                )
            )
        )
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


def run_fleets(
    configs: list[FleetConfig],
    progress_for: Callable[[FleetConfig], ProgressCallback | None] = lambda _c: None,
    progress_every_s: float = 5.0,
) -> list[FleetResult]:
    """Run several fleets at the same time, each against its own simulated server (or its
    ``llm_url``), until all end or SIGINT/SIGTERM stops them all; results in ``configs``
    order."""
    with ExitStack() as servers:
        urls = [
            config.llm_url or servers.enter_context(running_llm_server(config.server))
            for config in configs
        ]
        return asyncio.run(_run_side_by_side(configs, urls, progress_for, progress_every_s))
