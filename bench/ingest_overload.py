"""Ingest under sustained overload: bounded memory and queue, 503 + Retry-After (docs/ingest.md,
README.md#benchmarks).

    .venv/bin/python bench/ingest_overload.py [--seconds 120] [--senders 480]
                                              [--bomb-senders 60] [--chunked-senders 30]
                                              [--queue-max-spans N] [--out FILE]

``--senders`` keep-alive connections (threads of a separate, forked process) POST new
512-span protobuf batches back to back for ``--seconds``; every pass over the prepared
bodies swaps the trace-id prefix, so every accepted request carries new spans. With the
default queue bound (TPMLEDGER_QUEUE_MAX_SPANS), 480 senders offer more than
the queue admits, so the server must refuse with 503 + Retry-After; senders honour it.

Printed (and appended to ``bench/results/ingest_overload.txt`` as a dated section): peak
RSS of the ingest process and its children, summed (target ≤ 300 MB), and each one's share
at that peak (main process, normalizer workers, multiprocessing's resource tracker); RSS
every 10 s, answers by status, 503s with and without Retry-After, the largest queue depth
``/metrics`` showed against the configured bound, and whether the rows stored equal the
spans acknowledged with 200.

Hostile bodies run beside them, from another forked process, back to back and ignoring
Retry-After: ``--bomb-senders`` POST a ~61 KB gzip body that inflates to
``--bomb-mib`` (60) MiB of zeros, ``--chunked-senders`` POST a ``--chunked-mib`` (15) MiB
body with ``Transfer-Encoding: chunked`` (no Content-Length) in 256 KiB chunks. Both must
be charged what they inflate to (docs/ingest.md#limits), so the RSS target holds.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import multiprocessing
import os
import re
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ingest_workload as workload

from tpmledger.settings import Settings

RESULTS = workload.REPO / "bench" / "results" / "ingest_overload.txt"
_QUEUE_GAUGE = re.compile(r"^tpmledger_ingest_queue_depth_spans (\S+)$", re.MULTILINE)


class QueueWatcher(threading.Thread):
    """Polls ``/metrics`` for the queue-depth gauge and the process RSS, and times
    ``/healthz`` (the listener's event loop must stay responsive under overload)."""

    def __init__(self, host: str, port: int, rss: workload.RssSampler) -> None:
        super().__init__(daemon=True)
        self.host, self.port, self.rss = host, port, rss
        self.peak_queue: float | None = None
        self.timeline: list[tuple[float, float | None, int]] = []
        self.health_s: list[float] = []
        self.health_failures = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        next_mark = 0.0
        while not self._stop_event.wait(0.25):
            self._time_health()
            depth = self._queue_depth()
            if depth is not None:
                self.peak_queue = max(self.peak_queue or 0.0, depth)
            elapsed = time.monotonic() - started
            if elapsed >= next_mark:
                self.timeline.append((elapsed, depth, self.rss.peak_bytes))
                next_mark += 10.0

    def _time_health(self) -> None:
        started = time.perf_counter()
        try:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
            conn.request("GET", "/healthz")
            ok = conn.getresponse().status == 200
            conn.close()
        except (OSError, http.client.HTTPException):
            ok = False
        if ok:
            self.health_s.append(time.perf_counter() - started)
        else:
            self.health_failures += 1

    def _queue_depth(self) -> float | None:
        try:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=5)
            conn.request("GET", "/metrics")
            match = _QUEUE_GAUGE.search(conn.getresponse().read().decode())
            conn.close()
        except (OSError, http.client.HTTPException):
            return None
        return float(match.group(1)) if match else None

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


_CHUNK = 256 * 1024


def _hostile_sender(
    host: str, port: int, kind: str, body: bytes, deadline: float, tally: Counter[str]
) -> None:
    """Posts one hostile body back to back until ``deadline`` (Retry-After ignored)."""

    def chunks() -> Iterator[bytes]:
        for at in range(0, len(body), _CHUNK):
            yield body[at : at + _CHUNK]

    while time.monotonic() < deadline:
        conn = http.client.HTTPConnection(host, port, timeout=120)
        headers = {"Content-Type": "application/x-protobuf"}
        try:
            if kind == "bomb":
                headers["Content-Encoding"] = "gzip"
                conn.request("POST", "/v1/traces", body=body, headers=headers)
            else:
                conn.request(
                    "POST", "/v1/traces", body=chunks(), headers=headers, encode_chunked=True
                )
            response = conn.getresponse()
            response.read()
            tally[f"{kind} {response.status}"] += 1
        except (OSError, http.client.HTTPException):
            # Refused mid-body: the server answered and closed while we were still sending.
            tally[f"{kind} cut off"] += 1
            time.sleep(0.05)
        finally:
            conn.close()


def _send_hostile(
    host: str, port: int, senders: dict[str, tuple[int, bytes]], seconds: float, out: Any
) -> None:
    tally: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    threads = [
        threading.Thread(
            target=_hostile_sender, args=(host, port, kind, body, deadline, tally), daemon=True
        )
        for kind, (count, body) in senders.items()
        for _ in range(count)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.send(dict(tally))
    out.close()


def start_hostile(
    host: str, port: int, senders: dict[str, tuple[int, bytes]], seconds: float
) -> tuple[Any, Any]:
    """Hostile senders in a forked process (own GIL); returns (process, result pipe)."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    process = ctx.Process(
        target=_send_hostile, args=(host, port, senders, seconds, child), daemon=True
    )
    process.start()
    return process, parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--senders", type=int, default=480)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--bodies", type=int, default=200, help="distinct bodies to loop over")
    parser.add_argument(
        "--queue-max-spans", type=int, default=None, help="TPMLEDGER_QUEUE_MAX_SPANS for ingest"
    )
    parser.add_argument("--bomb-senders", type=int, default=60)
    parser.add_argument("--bomb-mib", type=int, default=60, help="what one gzip bomb inflates to")
    parser.add_argument("--chunked-senders", type=int, default=30)
    parser.add_argument("--chunked-mib", type=int, default=15, help="size of one chunked body")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    bodies = workload.build_bodies(args.bodies * args.batch, args.batch)
    bomb = gzip.compress(bytes(args.bomb_mib * 2**20), compresslevel=9)
    hostile = {
        "bomb": (args.bomb_senders, bomb),
        "chunked": (args.chunked_senders, bytes(args.chunked_mib * 2**20)),
    }
    env = {}
    if args.queue_max_spans is not None:
        env["TPMLEDGER_QUEUE_MAX_SPANS"] = str(args.queue_max_spans)
    bound = args.queue_max_spans or Settings().queue_max_spans
    load_before = os.getloadavg()
    with workload.fresh_database() as db:
        ingest = workload.start_ingest(db.url, env)
        try:
            rss = workload.RssSampler(ingest.process.pid)
            rss.start()
            watcher = QueueWatcher(ingest.host, ingest.port, rss)
            watcher.start()
            hostile_process, hostile_results = start_hostile(
                ingest.host, ingest.port, hostile, args.seconds
            )
            sent = workload.send_in_child_process(
                ingest.host, ingest.port, bodies, args.senders, loop_seconds=args.seconds
            )
            hostile_tally = hostile_results.recv()
            hostile_process.join()
            watcher.stop()
            peak_rss = rss.stop()
            alive = ingest.process.poll() is None
        finally:
            ingest.stop()
        stored = workload.count_rows(db.url)

    accepted = sent.statuses.get(200, 0)
    refused = sent.statuses.get(503, 0)
    elapsed = sent.finished - sent.started
    lines = [
        f"tpmledger ingest overload — {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}",
        f"command: .venv/bin/python bench/ingest_overload.py --seconds {args.seconds:g} "
        f"--senders {args.senders} --bomb-senders {args.bomb_senders} --bomb-mib "
        f"{args.bomb_mib} --chunked-senders {args.chunked_senders} --chunked-mib "
        f"{args.chunked_mib}"
        + (f" --queue-max-spans {args.queue_max_spans}" if args.queue_max_spans else ""),
        f"machine: {os.cpu_count()} cpus; load average before {load_before[0]:.1f}, "
        f"after {os.getloadavg()[0]:.1f}",
        f"load: {args.senders} senders posting new {args.batch}-span protobuf batches for "
        f"{elapsed:.0f} s, honouring Retry-After",
        f"answers: {dict(sorted(sent.statuses.items()))}; 503 with Retry-After: "
        f"{sent.retry_after_503} of {refused}; transport errors: {len(sent.errors)}",
        f"hostile beside them: {args.bomb_senders} senders of a {len(bomb):,}-byte gzip body "
        f"inflating to {args.bomb_mib} MiB, {args.chunked_senders} senders of a "
        f"{args.chunked_mib} MiB chunked body (no Content-Length), back to back, "
        f"Retry-After ignored; answers: {dict(sorted(hostile_tally.items()))}",
        f"ingest peak RSS (process + children): {peak_rss / 2**20:.0f} MiB = "
        f"{peak_rss / 1e6:.0f} MB (target <= 300 MB: {'met' if peak_rss <= 300e6 else 'NOT met'})",
        "at the peak: "
        + ", ".join(f"{role} {size / 2**20:.0f} MiB" for role, size in rss.split_at_peak),
        "GET /healthz during the overload: "
        + (
            f"{len(watcher.health_s)} answered, p50 "
            f"{1000 * (workload.percentile(watcher.health_s, 0.5) or 0):.0f} ms, p99 "
            f"{1000 * (workload.percentile(watcher.health_s, 0.99) or 0):.0f} ms, max "
            f"{1000 * max(watcher.health_s):.0f} ms"
            if watcher.health_s
            else "never answered"
        )
        + f"; failed or timed out (10 s): {watcher.health_failures}",
        "RSS peak so far / queue depth every 10 s: "
        + ", ".join(
            f"{t:.0f}s {r / 2**20:.0f}MiB/" + ("?" if q is None else f"{q:.0f}")
            for t, q, r in watcher.timeline
        ),
        "queue depth (spans, /metrics): peak "
        + ("not measured" if watcher.peak_queue is None else f"{watcher.peak_queue:,.0f}")
        + f" against a bound of {bound:,}",
        f"durable under overload: {accepted * args.batch / elapsed:,.0f} spans/s "
        f"({accepted} requests acknowledged)",
        f"rows stored: {stored}; spans acknowledged with 200: {accepted * args.batch} "
        f"({'equal' if stored == accepted * args.batch else 'DIFFERENT'})",
        f"ingest process still running at the end: {'yes' if alive else 'NO'}",
    ]
    text = "\n".join(lines) + "\n"
    print(text, end="")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as out:  # dated sections: earlier results stay
        out.write(("\n" if args.out.stat().st_size else "") + text)
    return 0 if alive else 1


if __name__ == "__main__":
    sys.exit(main())
