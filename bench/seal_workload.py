"""The run the seal benchmarks generate and load, and one seal of it measured in a fresh
process (bench/seal.py, bench/summary_verify.py).

8 shards × cap 16 slots, 1.5–4 s calls, prompt 200–2000 / completion 50–750 tokens, 2 %
rate-limit errors retried on the same call id with resend_count 1, 30 % of attempts
reporting queue waits, TTFT on every success; deterministic, so its digests are stable.

A **dense** run (``minutes``) packs the same calls into that many minutes: each shard gets
as many slots as it takes (:func:`dense_cap`), so 2,000,000 attempts in 2 minutes are
~15,000 spans/s, ~900,000 attempts ending in one minute (bench/seal.py --minutes).
"""

from __future__ import annotations

import io
import subprocess
import sys
import zlib

import polars as pl

from tpmledger.storage.server.database import raw_transaction

RUN_ID = "bench_seal_1m"
BASE_NS = 1_769_917_440 * 1_000_000_000  # 2026-02-01T03:44:00Z
COPY_COLUMNS = (
    "trace_id", "span_id", "parent_span_id", "run_id", "shard_id", "declared_shard_count",
    "concurrency_cap", "call_id", "call_id_explicit", "resend_count", "start_ns", "end_ns",
    "queue_wait_s", "ttft_s", "prompt_tokens", "completion_tokens", "model", "provider",
    "operation_name", "status", "error_type", "http_status", "convention", "span_name",
    "span_kind", "span_attributes", "resource_attributes",
)  # fmt: skip


#: Seconds between two back-to-back calls of one slot (the calls last 1.5-4 s).
SLOT_STRIDE_S = 4
DEFAULT_CAP = 16


def _hex_id(expr: pl.Expr, width: int, prefix: str = "") -> pl.Expr:
    """A deterministic id of ``width`` bytes as lowercase hex (digits of ``expr``)."""
    text = pl.lit(prefix) + expr.cast(pl.String).str.zfill(width - len(prefix))
    return text.cast(pl.Binary).bin.encode("hex")


def generate(
    attempts: int, shards: int, cap: int = DEFAULT_CAP, *, offset: int = 0, run_id: str = RUN_ID
) -> pl.DataFrame:
    """The run's attempts in COPY_COLUMNS order (CSV-ready: bytea as \\x hex).

    ``offset`` starts the attempt numbering there (chunks of a larger run concatenate).
    """
    i = pl.col("i")

    def rnd(seed: int, modulo: int) -> pl.Expr:
        return (i.hash(seed) % modulo).cast(pl.Int64)

    j = i // shards  # attempt number within the shard
    slot_seq = j // cap  # back-to-back calls of one slot
    error = rnd(1, 50) == 0
    start = BASE_NS + slot_seq * SLOT_STRIDE_S * 1_000_000_000 + rnd(2, 500) * 1_000_000
    latency = 1_500_000_000 + rnd(3, 2_500) * 1_000_000
    own_call = pl.format("call-{}", i)
    # An attempt after a failed one in the same slot retries that call.
    prev = i - shards * cap
    prev_failed = (prev >= 0) & ((prev.hash(1) % 50) == 0)
    frame = pl.DataFrame({"i": pl.int_range(offset, offset + attempts, eager=True, dtype=pl.Int64)})
    # Trace ids of other runs carry a prefix of their own: runs share the attempts' key.
    prefix = "" if run_id == RUN_ID else f"r{zlib.crc32(run_id.encode()) % 10**7:07d}"
    out = frame.select(
        trace_id=pl.lit("\\x") + _hex_id(i, 16, prefix=prefix),
        span_id=pl.lit("\\x") + _hex_id(i, 8),
        parent_span_id=pl.lit("\\x") + _hex_id(i, 8, prefix="p"),
        run_id=pl.lit(run_id),
        shard_id=(i % shards).cast(pl.String),
        declared_shard_count=pl.lit(shards),
        concurrency_cap=pl.lit(cap),
        call_id=pl.when(prev_failed).then(pl.format("call-{}", prev)).otherwise(own_call),
        call_id_explicit=pl.lit(True),
        resend_count=pl.when(prev_failed).then(1).otherwise(0),
        start_ns=start,
        end_ns=start + latency,
        queue_wait_s=pl.when(rnd(4, 10) < 3).then(rnd(5, 3000) / 1000),
        ttft_s=pl.when(~error).then(0.05 + rnd(6, 1000) / 2000),
        prompt_tokens=pl.when(~error).then(200 + rnd(7, 1800)),
        completion_tokens=pl.when(~error).then(50 + rnd(8, 700)),
        model=pl.lit("gpt-4o-mini"),
        provider=pl.lit("openai"),
        operation_name=pl.lit("chat"),
        status=pl.when(error).then(pl.lit("error")).otherwise(pl.lit("ok")),
        error_type=pl.when(error).then(pl.lit("rate_limit")),
        http_status=pl.when(error).then(429).otherwise(200),
        convention=pl.lit("semconv"),
        span_name=pl.lit("chat gpt-4o-mini"),
        span_kind=pl.lit(3),
        span_attributes=pl.lit("{}"),
        resource_attributes=pl.lit("{}"),
    )
    return out.select(COPY_COLUMNS)


def dense_cap(attempts: int, shards: int, minutes: int | None) -> int:
    """Slots per shard: 16, or (``minutes``) as many as pack ``attempts`` into that many
    minutes of back-to-back calls."""
    if minutes is None:
        return DEFAULT_CAP
    strides = minutes * 60 // SLOT_STRIDE_S  # calls one slot makes in ``minutes``
    return max(-(-attempts // (shards * strides)), DEFAULT_CAP)


def run_id_for(attempts: int, minutes: int | None = None) -> str:
    """The generated run's id (the 1M run keeps the name its recorded digests carry)."""
    if minutes is not None:
        return f"bench_seal_{attempts}_in_{minutes}min"
    return RUN_ID if attempts == 1_000_000 else f"bench_seal_{attempts}"


def _copy_frame(conn: object, frame: pl.DataFrame) -> None:
    buffer = io.BytesIO()
    frame.write_csv(buffer, include_header=False)
    columns = ", ".join(COPY_COLUMNS)
    with (
        conn.cursor() as cur,  # type: ignore[attr-defined]
        cur.copy(f"COPY attempts ({columns}) FROM STDIN (FORMAT csv)") as copy,
    ):
        copy.write(buffer.getvalue())


#: Rows generated and COPYed at a time: a 10 M-attempt run loads in bounded memory.
LOAD_PART = 1_000_000


def load(
    url: str, attempts: int, shards: int, run_id: str = RUN_ID, cap: int = DEFAULT_CAP
) -> None:
    """Generate and COPY the run's attempts (a million at a time) and its ``runs`` row (as
    ingest would leave it); ``cap``: slots per shard (:func:`dense_cap`)."""
    first = last = None
    for offset in range(0, attempts, LOAD_PART):
        part = min(LOAD_PART, attempts - offset)
        frame = generate(part, shards, cap, offset=offset, run_id=run_id)
        ends = frame.get_column("end_ns")
        low, high = int(ends.min()), int(ends.max())  # type: ignore[arg-type]
        first = low if first is None else min(first, low)
        last = high if last is None else max(last, high)
        with raw_transaction(url) as conn:
            _copy_frame(conn, frame)
        del frame
    with raw_transaction(url) as conn:
        conn.execute(
            "INSERT INTO runs (run_id, first_event_ns, last_event_ns, shard_ids, "
            "declared_shard_count, concurrency_cap, attempts) VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (run_id, first, last, [str(s) for s in range(shards)], shards, cap, attempts),
        )
    with raw_transaction(url) as conn:
        conn.execute("ANALYZE attempts")


# Peak RSS from the process's own memory map (VmHWM). getrusage's ru_maxrss is not used:
# Linux keeps the larger of it and the forking parent's RSS across fork and exec, so a
# child of a bench process that had just sealed 10 M attempts reported that process's peak.
_SEAL_IN_A_FRESH_PROCESS = """
import resource, sys, time
from tpmledger.analytics.seal.sealing import seal_run
started = time.perf_counter()
seal_run(sys.argv[1], sys.argv[2], force=True)
took = time.perf_counter() - started
try:
    with open("/proc/self/status") as status:
        line = next(x for x in status if x.startswith("VmHWM:"))
    peak_mib = int(line.split()[1]) // 1024
except (OSError, StopIteration):
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
print(peak_mib, took)
"""


def seal_peak_rss(url: str, run_id: str) -> tuple[int, float]:
    """Peak RSS (MiB) and wall seconds of one seal in a new Python process: the benchmark's
    own process holds the generated run, so its RSS says nothing about a seal's."""
    done = subprocess.run(
        [sys.executable, "-c", _SEAL_IN_A_FRESH_PROCESS, url, run_id],
        capture_output=True,
        text=True,
        check=True,
    )
    rss, took = done.stdout.split()[-2:]
    return int(rss), float(took)


def run_stored(url: str, run_id: str) -> bool:
    with raw_transaction(url) as conn:
        row = conn.execute("SELECT attempts FROM runs WHERE run_id = %s", (run_id,)).fetchone()
    return row is not None
