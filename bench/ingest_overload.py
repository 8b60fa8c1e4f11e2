"""Ingest under sustained overload: bounded memory and queue, 503 + Retry-After (SPEC §3, §7).

    .venv/bin/python bench/ingest_overload.py [--seconds 120] [--senders 480]
                                              [--queue-max-spans N] [--out FILE]

``--senders`` keep-alive connections (threads of a separate, forked process) POST new
512-span protobuf batches back to back for ``--seconds``; every pass over the prepared
bodies swaps the trace-id prefix, so every accepted request carries new spans. With the
default queue bound (TPMLEDGER_QUEUE_MAX_SPANS), 480 senders offer more than
the queue admits, so the server must refuse with 503 + Retry-After; senders honour it.

Printed (and written to ``bench/results/ingest_overload.txt``): peak RSS of the ingest
process (target ≤ 300 MB), RSS every 10 s, answers by status, 503s with and without
Retry-After, the largest queue depth ``/metrics`` showed against the configured bound,
and whether the rows stored equal the spans acknowledged with 200.
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import sys
import threading
import time
from pathlib import Path

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--senders", type=int, default=480)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--bodies", type=int, default=200, help="distinct bodies to loop over")
    parser.add_argument(
        "--queue-max-spans", type=int, default=None, help="TPMLEDGER_QUEUE_MAX_SPANS for ingest"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    bodies = workload.build_bodies(args.bodies * args.batch, args.batch)
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
            sent = workload.send_in_child_process(
                ingest.host, ingest.port, bodies, args.senders, loop_seconds=args.seconds
            )
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
        f"--senders {args.senders}"
        + (f" --queue-max-spans {args.queue_max_spans}" if args.queue_max_spans else ""),
        f"machine: {os.cpu_count()} cpus; load average before {load_before[0]:.1f}, "
        f"after {os.getloadavg()[0]:.1f}",
        f"load: {args.senders} senders posting new {args.batch}-span protobuf batches for "
        f"{elapsed:.0f} s, honouring Retry-After",
        f"answers: {dict(sorted(sent.statuses.items()))}; 503 with Retry-After: "
        f"{sent.retry_after_503} of {refused}; transport errors: {len(sent.errors)}",
        f"ingest peak RSS (process + children): {peak_rss / 2**20:.0f} MiB = "
        f"{peak_rss / 1e6:.0f} MB (target <= 300 MB: {'met' if peak_rss <= 300e6 else 'NOT met'})",
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
    args.out.write_text(text)
    return 0 if alive else 1


if __name__ == "__main__":
    sys.exit(main())
