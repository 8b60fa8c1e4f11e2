"""Decompression bombs over OTLP/gRPC: ingest memory must stay bounded (docs/ingest.md#limits).

    .venv/bin/python bench/grpc_bombs.py [--calls 40] [--bomb-mib 63] [--rounds 2]
                                         [--signal traces|metrics|logs|all] [--out FILE]

A separate process opens ``--calls`` gRPC channels (one connection each, so a
per-connection stream limit cannot help) and sends, all at once, one ``Export`` call
each whose message is ``--bomb-mib`` MiB of zeros compressed with gzip by gRPC (about
60 KB on the wire); ``--rounds`` times, for the trace, metrics and logs services. The
ingest process's RSS is sampled every 20 ms (``VmRSS``) and its high-water mark read from
``/proc/PID/status`` (``VmHWM``); the normalizer workers are children and are reported
apart. Baseline in the same run: the idle ingest's RSS before the first bomb; and, for
comparison, honest 512-span batches sent over gRPC after the bombs must still be stored.

Printed and written to ``bench/results/grpc_bombs.txt``; target: ingest RSS ≤ 300 MB with
40 bombs.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpc
import ingest_workload as workload

RESULTS = workload.REPO / "bench" / "results" / "grpc_bombs.txt"
METHODS = {
    "traces": "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    "metrics": "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
    "logs": "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
}


def proc_status_kib(pid: int, field: str) -> int:
    """A ``VmRSS`` / ``VmHWM`` line of /proc/PID/status, in KiB (0 when gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class RssWatch(threading.Thread):
    """Samples the ingest process's VmRSS (without children) every 20 ms."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_kib = 0
        self.last_kib = 0
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.last_kib = proc_status_kib(self.pid, "VmRSS")
            self.peak_kib = max(self.peak_kib, self.last_kib)
            self._halt.wait(0.02)

    def stop(self) -> None:
        self._halt.set()
        self.join()


async def _bomb_round(target: str, method: str, calls: int, message: bytes) -> Counter[str]:
    channels = [
        grpc.aio.insecure_channel(target, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(calls)
    ]
    try:

        async def one(channel: grpc.aio.Channel) -> str:
            stub = channel.unary_unary(method, request_serializer=None)
            try:
                await stub(message, timeout=120, compression=grpc.Compression.Gzip)
            except grpc.aio.AioRpcError as err:
                return err.code().name
            return "OK"

        return Counter(await asyncio.gather(*(one(c) for c in channels)))
    finally:
        for channel in channels:
            await channel.close()


def _send_bombs(
    target: str, signals: list[str], calls: int, mib: int, rounds: int, out: object
) -> None:
    message = bytes(mib * 2**20)
    tally: dict[str, dict[str, int]] = {}
    for signal in signals:
        total: Counter[str] = Counter()
        for _ in range(rounds):
            total += asyncio.run(_bomb_round(target, METHODS[signal], calls, message))
        tally[signal] = dict(total)
    out.send(tally)  # type: ignore[attr-defined]


async def _honest(target: str, bodies: list[bytes]) -> Counter[str]:
    async with grpc.aio.insecure_channel(target) as channel:
        stub = channel.unary_unary(METHODS["traces"], request_serializer=None)
        answers: Counter[str] = Counter()
        for body in bodies:
            try:
                await stub(body, timeout=60, compression=grpc.Compression.Gzip)
                answers["OK"] += 1
            except grpc.aio.AioRpcError as err:
                answers[err.code().name] += 1
        return answers


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=40, help="concurrent bombs per round")
    parser.add_argument("--bomb-mib", type=int, default=63, help="what one message inflates to")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--signal", choices=[*METHODS, "all"], default="all")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    signals = list(METHODS) if args.signal == "all" else [args.signal]

    honest_bodies = workload.build_bodies(8 * 512, 512)
    load_before = os.getloadavg()
    with workload.fresh_database() as db:
        ingest = workload.start_ingest(db.url)
        pid = ingest.process.pid
        target = f"{ingest.host}:{ingest.grpc_port}"
        try:
            time.sleep(1.0)
            idle_kib = proc_status_kib(pid, "VmRSS")
            watch = RssWatch(pid)
            watch.start()
            receive, send = multiprocessing.Pipe(duplex=False)
            sender = multiprocessing.get_context("fork").Process(
                target=_send_bombs,
                args=(target, signals, args.calls, args.bomb_mib, args.rounds, send),
            )
            started = time.monotonic()
            sender.start()
            tally = receive.recv()
            sender.join()
            bomb_seconds = time.monotonic() - started
            after_bombs_kib = proc_status_kib(pid, "VmRSS")
            time.sleep(15)
            held_kib = proc_status_kib(pid, "VmRSS")
            honest = asyncio.run(_honest(target, honest_bodies))
            watch.stop()
            hwm_kib = proc_status_kib(pid, "VmHWM")
            children = workload.psutil.Process(pid).children(recursive=True)
            child_hwm = [proc_status_kib(c.pid, "VmHWM") for c in children]
        finally:
            ingest.stop()
        stored = workload.count_rows(db.url)

    peak_mb = hwm_kib * 1024 / 1e6
    stamp = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    lines = [
        f"tpmledger gRPC decompression bombs — {stamp}",
        f"command: .venv/bin/python bench/grpc_bombs.py --calls {args.calls} --bomb-mib "
        f"{args.bomb_mib} --rounds {args.rounds} --signal {args.signal}",
        f"machine: {os.cpu_count()} cpus; load average before {load_before[0]:.1f}, "
        f"after {os.getloadavg()[0]:.1f}",
        f"load: {args.rounds} rounds x {args.calls} concurrent Export calls (one channel each) "
        f"of {args.bomb_mib} MiB of zeros, gzip-compressed by gRPC, per signal: "
        f"{', '.join(signals)}; {bomb_seconds:.1f} s",
        f"answers: {tally}",
        f"ingest RSS idle before the bombs (baseline): {idle_kib / 1024:.0f} MiB",
        f"ingest peak RSS (VmHWM of the listener process): {hwm_kib / 1024:.0f} MiB = "
        f"{peak_mb:.0f} MB = {hwm_kib / max(idle_kib, 1):.2f} x idle "
        f"(target <= 300 MB: {'met' if peak_mb <= 300 else 'NOT met'}); sampled peak VmRSS "
        f"{watch.peak_kib / 1024:.0f} MiB",
        f"ingest RSS right after the bombs {after_bombs_kib / 1024:.0f} MiB, 15 s later "
        f"{held_kib / 1024:.0f} MiB",
        "normalizer workers' VmHWM (children): "
        + (", ".join(f"{k / 1024:.0f} MiB" for k in child_hwm) or "none"),
        f"honest traffic after the bombs: {len(honest_bodies)} gzip batches of 512 spans over "
        f"gRPC: {dict(honest)}; rows stored {stored:,}",
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)


if __name__ == "__main__":
    main()
