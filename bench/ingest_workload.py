"""What the ingest benchmarks share: realistic LLM span batches, a fresh database, the
ingest process, its memory, and the senders.

The span batches look like the simulator's (docs/conventions.md): ``tpmledger.*`` resource
attributes
of one shard and per-attempt ``gen_ai.*`` span attributes, ~5 % of attempts failed with a
429 and retried under the same ``tpmledger.call.id``. Bodies are serialized before any
timing starts so the senders cost the server as little CPU as possible.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import psycopg
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, Span, Status

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.otlp_values import key_value  # noqa: E402
from tpmledger.storage.server import migrate  # noqa: E402 - after the sys.path fix for `python bench/x.py`
from tpmledger.storage.server.database import get_engine, libpq_url  # noqa: E402

SHARDS = 8
MODELS = ("llama-3.1-70b-instruct", "qwen2.5-72b-instruct")


def _resource_spans(run_id: str, shard: int) -> ResourceSpans:
    rs = ResourceSpans()
    for key, value in (
        ("service.name", "newgen-shard-worker"),
        ("tpmledger.run.id", run_id),
        ("tpmledger.shard.id", str(shard)),
        ("tpmledger.shard.count", SHARDS),
        ("tpmledger.concurrency.cap", 16),
        ("telemetry.sdk.language", "python"),
        ("telemetry.sdk.name", "opentelemetry"),
    ):
        rs.resource.attributes.append(key_value(key, value))
    rs.scope_spans.add().scope.name = "tpmledger.simulator"
    return rs


def _fill_span(span: Span, rng: random.Random, call_id: str, resend: int, failed: bool) -> None:
    model = MODELS[rng.randrange(len(MODELS))]
    span.name = f"chat {model}"
    span.kind = Span.SPAN_KIND_CLIENT
    attrs = [
        key_value("tpmledger.call.id", call_id),  # first: rewritten per span by build_bodies
        key_value("gen_ai.operation.name", "chat"),
        key_value("gen_ai.request.model", model),
        key_value("gen_ai.provider.name", "openai"),
        key_value("tpmledger.queue.wait_s", round(rng.uniform(0, 2.5), 4)),
        key_value("server.address", "127.0.0.1"),
    ]
    if resend:
        attrs.append(key_value("http.request.resend_count", resend))
    if failed:
        attrs += [key_value("error.type", "429"), key_value("http.response.status_code", 429)]
        span.status.code = Status.STATUS_CODE_ERROR
    else:
        attrs += [
            key_value("gen_ai.response.model", model),
            key_value("gen_ai.usage.input_tokens", rng.randint(200, 1800)),
            key_value("gen_ai.usage.output_tokens", rng.randint(50, 900)),
            key_value("gen_ai.response.time_to_first_chunk", round(rng.uniform(0.05, 1.5), 4)),
            key_value("gen_ai.response.finish_reasons", ["stop"]),
            key_value("http.response.status_code", 200),
        ]
    span.attributes.extend(attrs)


def build_bodies(
    total_spans: int,
    batch: int = 512,
    *,
    seed: int = 7,
    run_id: str | None = None,
    base_ns: int | None = None,
    step_ns: int = 7_000_000,
) -> list[bytes]:
    """Serialized ``ExportTraceServiceRequest`` bodies holding ``total_spans`` unique spans.

    Request ``i`` comes from shard ``i % 8``; span ``n`` starts ``base_ns + n × step_ns``
    (default: an hour ago, 7 ms apart). Each request is a copy of one of a few
    templates with ids, times and call ids rewritten, which keeps generation fast while
    every span stays unique.
    """
    rng = random.Random(seed)
    run_id = run_id or f"bench_{uuid.uuid4().hex[:8]}"
    # 8 random bytes lead every trace id; senders that loop swap them (see send_bodies).
    prefix = rng.randbytes(8)
    templates: list[ExportTraceServiceRequest] = []
    for t in range(SHARDS * 2):
        request = ExportTraceServiceRequest()
        rs = request.resource_spans.add()
        rs.CopyFrom(_resource_spans(run_id, t % SHARDS))
        for _ in range(batch):
            failed = rng.random() < 0.05
            _fill_span(rs.scope_spans[0].spans.add(), rng, "", 0, failed)
        templates.append(request)
    if base_ns is None:
        base_ns = time.time_ns() - 3600 * 1_000_000_000
    bodies: list[bytes] = []
    serial = 0
    remaining = total_spans
    while remaining > 0:
        request = ExportTraceServiceRequest()
        request.CopyFrom(templates[len(bodies) % len(templates)])
        spans = request.resource_spans[0].scope_spans[0].spans
        count = min(batch, remaining)
        del spans[count:]
        for span in spans:
            serial += 1
            span.trace_id = prefix + serial.to_bytes(8, "big")
            span.span_id = (serial | 1 << 62).to_bytes(8, "big")
            span.start_time_unix_nano = base_ns + serial * step_ns
            span.end_time_unix_nano = span.start_time_unix_nano + 1_000_000 * (200 + serial % 5000)
            span.attributes[0].value.string_value = f"call-{serial:x}"
        bodies.append(request.SerializeToString())
        remaining -= count
    return bodies


def trace_id_prefix(body: bytes) -> bytes:
    """The 8 bytes every trace id of a :func:`build_bodies` body starts with."""
    request = ExportTraceServiceRequest.FromString(body)
    return bytes(request.resource_spans[0].scope_spans[0].spans[0].trace_id[:8])


@dataclass
class BenchDatabase:
    """A fresh database; ``postmaster_pid`` is known for the embedded server only."""

    url: str
    postmaster_pid: int | None


def cpu_seconds(pid: int | None, *, with_children: bool = False) -> float | None:
    """User + system CPU of a process (and of its live and reaped children), or None."""
    if pid is None:
        return None
    try:
        process = psutil.Process(pid)
        times = process.cpu_times()
        total = times.user + times.system
        if with_children:
            total += times.children_user + times.children_system
            for child in process.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    child_times = child.cpu_times()
                    total += child_times.user + child_times.system
        return total
    except psutil.Error:
        return None


@contextlib.contextmanager
def fresh_database() -> Iterator[BenchDatabase]:
    """A new, migrated database: on ``TPMLEDGER_DATABASE_URL``'s server, else embedded."""
    external = os.environ.get("TPMLEDGER_DATABASE_URL")
    tmp = None
    server = None
    if external:
        admin_url = external
    else:
        from tpmledger.storage.server.embedded_postgres import (
            remove_throwaway_server,
            throwaway_server,
        )

        tmp = Path(tempfile.mkdtemp(prefix="tpmledger-bench-"))
        os.environ.setdefault("XDG_RUNTIME_DIR", str(tmp / "run"))
        Path(os.environ["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True, mode=0o700)
        server = throwaway_server(tmp / "pg")
        admin_url = str(server.get_uri("postgres"))
    name = f"bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq_url(admin_url), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    from sqlalchemy.engine import make_url

    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    migrate.upgrade(url)
    get_engine(url).dispose()
    try:
        yield BenchDatabase(url, server.get_pid() if server is not None else None)
    finally:
        get_engine(url).dispose()
        with psycopg.connect(libpq_url(admin_url), autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        if server is not None:
            remove_throwaway_server(server)
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def count_rows(url: str) -> int:
    """Rows in ``attempts``."""
    with psycopg.connect(libpq_url(url)) as conn:
        row = conn.execute("SELECT count(*) FROM attempts").fetchone()
    return int(row[0]) if row else 0


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class IngestProcess:
    """``tpmledger serve ingest`` as a child process on free ports."""

    process: subprocess.Popen[bytes]
    host: str
    port: int
    log_path: Path
    grpc_port: int = 0

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_ingest(database_url: str, env: dict[str, str] | None = None) -> IngestProcess:
    """Start ingest on ``database_url`` and wait until ``/readyz`` answers 200."""
    port = free_port()
    log_path = Path(tempfile.mkstemp(prefix="bench-ingest-", suffix=".log")[1])
    command = [sys.executable, "-m", "tpmledger.cli.main", "serve", "ingest"]
    grpc_port = free_port()
    command += ["--http-port", str(port), "--grpc-port", str(grpc_port)]
    full_env = {**os.environ, "TPMLEDGER_DATABASE_URL": database_url, **(env or {})}
    with log_path.open("wb") as log:
        process = subprocess.Popen(command, env=full_env, stdout=log, stderr=subprocess.STDOUT)
    ingest = IngestProcess(process, "127.0.0.1", port, log_path, grpc_port)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"ingest exited:\n{log_path.read_text()}")
        with contextlib.suppress(OSError):
            conn = http.client.HTTPConnection(ingest.host, port, timeout=2)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                return ingest
        time.sleep(0.2)
    ingest.stop()
    raise TimeoutError(f"ingest not ready:\n{log_path.read_text()}")


class RssSampler(threading.Thread):
    """Samples the RSS of a process and its children every ``interval`` seconds."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.interval = interval
        self.peak_bytes = 0
        # At the peak: (what, RSS) of the process and of each child (normalizer workers,
        # multiprocessing's resource tracker), so a result says where the peak was.
        self.split_at_peak: list[tuple[str, int]] = []
        self._stop_event = threading.Event()

    def run(self) -> None:
        while not self._stop_event.is_set():
            with contextlib.suppress(psutil.Error):
                procs = [self.process, *self.process.children(recursive=True)]
                sizes = [p.memory_info().rss for p in procs]
                if sum(sizes) > self.peak_bytes:
                    self.peak_bytes = sum(sizes)
                    self.split_at_peak = [
                        (_role(p, p is self.process), size)
                        for p, size in zip(procs, sizes, strict=True)
                    ]
            self._stop_event.wait(self.interval)

    def stop(self) -> int:
        self._stop_event.set()
        self.join()
        return self.peak_bytes


def _role(process: psutil.Process, is_root: bool) -> str:
    if is_root:
        return "main"
    command = " ".join(process.cmdline())
    if "resource_tracker" in command:
        return "resource tracker"
    return "worker" if "spawn_main" in command else "child"


@dataclass
class SendResult:
    """What the senders saw: per-request latency of every 200, and every status code."""

    latencies_s: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    retry_after_503: int = 0
    started: float = 0.0
    finished: float = 0.0
    errors: list[str] = field(default_factory=list)
    cpu_s: float = 0.0  # CPU the senders themselves used (they share the machine)


def _post(conn: http.client.HTTPConnection, body: bytes) -> tuple[int, str | None]:
    conn.request(
        "POST", "/v1/traces", body=body, headers={"Content-Type": "application/x-protobuf"}
    )
    response = conn.getresponse()
    response.read()
    return response.status, response.getheader("Retry-After")


def send_bodies(
    host: str,
    port: int,
    bodies: list[bytes],
    senders: int,
    *,
    loop_seconds: float | None = None,
    honour_retry_after: bool = True,
) -> SendResult:
    """POST every body once (or, with ``loop_seconds``, keep going for that long) from
    ``senders`` threads, each on its own keep-alive connection; a 503 is retried with the
    same body after Retry-After. In loop mode each pass swaps the trace-id prefix so every
    request carries new spans."""
    result = SendResult()
    cpu_started = time.process_time()
    lock = threading.Lock()
    next_index = [0]
    prefix = trace_id_prefix(bodies[0]) if loop_seconds else b""
    deadline = [0.0]

    def take() -> bytes | None:
        with lock:
            i = next_index[0]
            next_index[0] += 1
        if loop_seconds is None:
            return bodies[i] if i < len(bodies) else None
        if time.monotonic() >= deadline[0]:
            return None
        loop, j = divmod(i, len(bodies))
        if loop == 0:
            return bodies[j]
        return bodies[j].replace(prefix, prefix[:4] + (loop ^ 0x5A5A5A5A).to_bytes(4, "big"))

    def worker() -> None:
        conn = http.client.HTTPConnection(host, port, timeout=120)
        statuses: dict[int, int] = {}
        latencies: list[float] = []
        with_retry_after = 0
        while (body := take()) is not None:
            while True:
                t0 = time.perf_counter()
                try:
                    status, retry_after = _post(conn, body)
                except (OSError, http.client.HTTPException) as exc:
                    conn.close()
                    conn = http.client.HTTPConnection(host, port, timeout=120)
                    with lock:
                        result.errors.append(repr(exc))
                    time.sleep(0.2)
                    continue
                statuses[status] = statuses.get(status, 0) + 1
                if status == 200:
                    latencies.append(time.perf_counter() - t0)
                    break
                if status == 503:
                    with_retry_after += retry_after is not None
                    if honour_retry_after:
                        time.sleep(min(float(retry_after or 1), 5.0))
                    if loop_seconds and time.monotonic() >= deadline[0]:
                        break
                    continue
                with lock:
                    result.errors.append(f"HTTP {status}")
                break
        conn.close()
        with lock:
            result.latencies_s.extend(latencies)
            result.retry_after_503 += with_retry_after
            for code, n in statuses.items():
                result.statuses[code] = result.statuses.get(code, 0) + n

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(senders)]
    result.started = time.perf_counter()
    deadline[0] = time.monotonic() + (loop_seconds or 0)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result.finished = time.perf_counter()
    result.cpu_s = time.process_time() - cpu_started
    return result


def send_in_child_process(
    host: str, port: int, bodies: list[bytes], senders: int, **kw: Any
) -> SendResult:
    """Run :func:`send_bodies` in a forked process (own GIL; bodies shared copy-on-write)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)

    def target() -> None:
        child.send(send_bodies(host, port, bodies, senders, **kw))
        child.close()

    process = ctx.Process(target=target, daemon=True)
    process.start()
    result: SendResult = parent.recv()
    process.join()
    return result


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile (nearest rank) or None when there is nothing to rank."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]
