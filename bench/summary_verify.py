"""Offline summary verification cost on a large run (no database involved).

    .venv/bin/python bench/summary_verify.py [--events 1000000] [--shards 8] [--minutes 60]

Builds ``--events`` synthetic canonical events (Polars, seeded), writes a complete export
directory the way ``summary export`` does (figures from the analytics code, minute leaves
and proofs, DSSE envelope, Sigstore bundle), then times the reference recomputation
(standard library only: canonical check, every figure, minute leaves, Merkle root) and
the full ``verify_export`` (signature, digest, canonical form, every figure, minute tree,
every proof), and prints the verifier's peak memory. Asserts nothing about time.
"""

from __future__ import annotations

import argparse
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from analytics.summary_export import summary_from_events, write_export
from provenance.signing_keys import SigningKey
from provenance.summary_recompute import recompute_from_events
from provenance.summary_verify import verify_export

BASE_NS = 1_769_917_440 * 1_000_000_000  # 2026-02-01T03:44:00Z


def _uniform(seed: int, low: int, high: int) -> pl.Expr:
    """Seeded pseudo-random integers in [low, high) per row (hash of the row number)."""
    return (pl.int_range(pl.len()).hash(seed) % (high - low)).cast(pl.Int64) + low


def synthetic_events(n: int, shards: int, minutes: int) -> pl.DataFrame:
    """Canonical events: ~8 % failed attempts (one resend each), TTFT on successes."""
    row = pl.int_range(pl.len())
    ok = _uniform(1, 0, 100) >= 8
    end = BASE_NS + _uniform(2, 0, minutes * 60 * 1_000_000_000)
    frame = pl.DataFrame({"i": range(n)}).select(
        call_id=pl.format("c{}", row),
        completion_tokens=pl.when(ok).then(_uniform(3, 50, 800)),
        end_ns=end,
        error_type=pl.when(~ok).then(pl.lit("http_429")),
        http_status=pl.when(ok).then(200).otherwise(429).cast(pl.Int64),
        model=pl.lit("gpt-test"),
        prompt_tokens=pl.when(ok).then(_uniform(4, 200, 2000)),
        queue_wait_s=_uniform(5, 0, 400) / 1000,
        resend_count=pl.when(ok).then(0).otherwise(1).cast(pl.Int64),
        run_id=pl.lit("bench-run"),
        shard_id=_uniform(6, 0, shards).cast(pl.String),
        span_id=pl.format("{}", row.cast(pl.String).str.zfill(16)),
        start_ns=end - _uniform(7, 300_000_000, 4_000_000_000),
        status=pl.when(ok).then(pl.lit("ok")).otherwise(pl.lit("error")),
        trace_id=row.cast(pl.String).str.zfill(32),
        ttft_s=pl.when(ok).then(_uniform(8, 20, 900) / 1000),
    )
    return frame


def timed(label: str, fn, *args, **kwargs):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    print(f"{label:<44} {time.perf_counter() - start:8.3f} s")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--minutes", type=int, default=60)
    args = parser.parse_args()
    print(f"python {platform.python_version()}, polars {pl.__version__}, {args.events} events")

    events = synthetic_events(args.events, args.shards, args.minutes)
    key = SigningKey(Ed25519PrivateKey.generate(), Path("bench.key"))
    summary = timed(
        "export: file, figures, proofs, signature",
        summary_from_events,
        events,
        key,
        run_id="bench-run",
        computed_at="2026-02-01T05:00:00.000Z",
    )
    del events
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        timed("write export directory", write_export, summary, out)
        size = (out / "events.jsonl").stat().st_size
        print(f"events.jsonl: {size / 1e6:.1f} MB, {summary.minute_proofs['tree_size']} minutes")
        timed("reference recompute (figures, leaves, root)", recompute_from_events, summary.events)
        report = timed("verify_export (all checks)", verify_export, out)
        print("checks:", ", ".join(f"{c.name}={'pass' if c.ok else 'FAIL'}" for c in report.checks))
        # What a user runs: a fresh process, imports included, nothing else in memory.
        command = [str(Path(sys.executable).with_name("tpmledger")), "summary", "verify", tmp]
        result = timed(
            "`tpmledger summary verify` (new process)",
            subprocess.run,
            command,
            stdout=subprocess.DEVNULL,
        )
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        print(f"  exit {result.returncode}, peak RSS of that process {peak / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
