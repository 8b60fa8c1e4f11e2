"""The issue-41 probes against a real ingest: amplification bodies, a stalled upload, and
the attribute-cache probe; ingest RSS (listener and workers) and ``/healthz`` latency.

    .venv/bin/python bench/ingest_probes.py [--out FILE]

One ingest process (2 normalizer workers by default) on a fresh database. While each probe
runs, a thread asks ``/healthz`` every 50 ms (the slowest answer is kept; no answer within
5 s counts as 5 s) and another samples the RSS of the listener and of each worker every
50 ms. Probes:

1. amplification: the seven bodies of tests/ingest/probe_bodies.py (about 15 KB of gzip
   each: 5.2 M empty spans / points / records as OTLP/JSON, 7.5 M as protobuf, 7 M empty
   attributes), each sent 3 times; the answer codes are recorded;
2. slow sender: two clients declare ``Content-Length: 16777216`` and send nothing, while
   40 honest HTTP exports and 40 gRPC exports are made; the answer codes are recorded,
   and the time until the stalled uploads are answered (408 after TPMLEDGER_BODY_STALL_S);
3. attribute cache: 101 gzip'd requests, each one span with 20 distinct 60 KB attribute
   values (1.4 MiB on the wire in all); the workers' RSS before and after, and
   ``tpmledger_ingest_cache_bytes`` from /metrics.

Printed and written to ``bench/results/ingest_probes.txt``; done when ingest stays under
300 MB and ``/healthz`` answers within 1 s throughout.
"""

from __future__ import annotations

import argparse
import gzip
import re
import socket
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpc
import httpx
import ingest_workload as workload

from tests.ingest.otlp_builders import export_request, llm_span
from tests.ingest.probe_bodies import probes

RESULTS = workload.REPO / "bench" / "results" / "ingest_probes.txt"
TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
MIB = 2**20


class HealthWatch(threading.Thread):
    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.slowest = 0.0
        self.asked = 0
        self._halt = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self._halt.is_set():
                started = time.monotonic()
                try:
                    ok = client.get(f"{self.url}/healthz").status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.slowest = max(self.slowest, time.monotonic() - started if ok else 5.0)
                self.asked += 1
                self._halt.wait(0.05)

    def stop(self) -> float:
        self._halt.set()
        self.join()
        return self.slowest


def _measured(url: str, pid: int, probe: callable) -> tuple[object, float, int, list]:  # type: ignore[valid-type]
    health = HealthWatch(url)
    rss = workload.RssSampler(pid)
    health.start()
    rss.start()
    try:
        outcome = probe()
    finally:
        slowest = health.stop()
        peak = rss.stop()
    return outcome, slowest, peak, rss.split_at_peak


def amplification(url: str) -> Counter[str]:
    answers: Counter[str] = Counter()
    with httpx.Client(base_url=url, timeout=120) as client:
        for name, path, media, body in probes():
            for _ in range(3):
                answer = client.post(
                    path, content=body, headers={"Content-Type": media, "Content-Encoding": "gzip"}
                )
                answers[f"{name}: {answer.status_code}"] += 1
    return answers


def slow_sender(url: str, host: str, port: int, grpc_port: int) -> dict[str, object]:
    stalled = []
    for _ in range(2):
        sock = socket.create_connection((host, port))
        sock.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/x-protobuf\r\nContent-Length: 16777216\r\n\r\n"
        )
        stalled.append(sock)
    started = time.monotonic()
    http_codes: Counter[int] = Counter()
    grpc_codes: Counter[str] = Counter()
    with grpc.insecure_channel(f"{host}:{grpc_port}") as channel:
        call = channel.unary_unary(TRACE_EXPORT)
        for i in range(40):
            body = export_request([llm_span() for _ in range(50)], run_id="probe-slow")
            raw = body.SerializeToString()
            answer = httpx.post(
                f"{url}/v1/traces",
                content=raw,
                headers={"Content-Type": "application/x-protobuf"},
                timeout=30,
            )
            http_codes[answer.status_code] += 1
            try:
                call(raw, timeout=30)
                grpc_codes["OK"] += 1
            except grpc.RpcError as exc:
                grpc_codes[exc.code().name] += 1  # type: ignore[attr-defined]
            del i
    answered = []
    for sock in stalled:
        sock.settimeout(30)
        try:
            first = sock.recv(64).split(b"\r\n", 1)[0].decode()
        except OSError as exc:
            first = type(exc).__name__
        answered.append((first, round(time.monotonic() - started, 1)))
        sock.close()
    return {"http": dict(http_codes), "grpc": dict(grpc_codes), "stalled answered": answered}


_CACHE = re.compile(rb'^tpmledger_ingest_cache_bytes\{cache="(\w+)"\} (\S+)$', re.M)


def attribute_cache(url: str, pid: int) -> dict[str, object]:
    import psutil

    def workers() -> int:
        children = psutil.Process(pid).children(recursive=True)
        return sum(child.memory_info().rss for child in children)

    before = workers()
    wire = 0
    codes: Counter[int] = Counter()
    for r in range(101):
        extra = {f"blob.{k}": f"{r}-{k}-" + "x" * 60_000 for k in range(20)}
        body = gzip.compress(
            export_request([llm_span(**extra)], run_id="probe-cache").SerializeToString()
        )
        wire += len(body)
        answer = httpx.post(
            f"{url}/v1/traces",
            content=body,
            headers={"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"},
            timeout=60,
        )
        codes[answer.status_code] += 1
    after = workers()
    metrics = httpx.get(f"{url}/metrics", timeout=30).content
    return {
        "wire MiB": round(wire / MIB, 2),
        "answers": dict(codes),
        "workers MiB before": round(before / MIB),
        "workers MiB after": round(after / MIB),
        "cache bytes": {k.decode(): float(v) for k, v in _CACHE.findall(metrics)},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    lines = [f"# bench/ingest_probes.py, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"]
    with workload.fresh_database() as database:
        ingest = workload.start_ingest(database.url, {"TPMLEDGER_BODY_STALL_S": "5"})
        url = f"http://{ingest.host}:{ingest.port}"
        pid = ingest.process.pid
        try:
            idle = workload.RssSampler(pid)
            idle.start()
            time.sleep(1)
            lines.append(f"idle ingest (listener + workers): {idle.stop() / MIB:.0f} MiB")
            runs = [
                ("amplification", lambda: amplification(url)),
                (
                    "slow sender",
                    lambda: slow_sender(url, ingest.host, ingest.port, ingest.grpc_port),
                ),
                ("attribute cache", lambda: attribute_cache(url, pid)),
            ]
            for name, probe in runs:
                outcome, slowest, peak, split = _measured(url, pid, probe)
                parts = ", ".join(f"{role} {size / MIB:.0f}" for role, size in split)
                lines.append(f"\n## {name}")
                lines.append(f"outcome: {outcome}")
                lines.append(f"peak RSS listener + workers: {peak / MIB:.0f} MiB ({parts})")
                lines.append(f"slowest /healthz: {slowest:.3f} s")
                verdict = peak < 300 * 10**6 and slowest < 1.0
                lines.append(f"under 300 MB and /healthz < 1 s: {'yes' if verdict else 'NO'}")
        finally:
            ingest.stop()
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
