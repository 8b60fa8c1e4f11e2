"""Offline summary verification of a sealed 1 M-attempt run, against the seal of that run.

    .venv/bin/python bench/summary_verify.py [--attempts 1000000] [--shards 8] [--repeat 3]
                                             [--export-dir DIR]

1. A fresh, migrated database (``TPMLEDGER_DATABASE_URL``'s server, else an embedded
   pgserver in a temp dir) receives the run ``bench/seal.py`` generates (its ``load``:
   same attempts, same digests). Not timed.
2. Seal: ``seal_run(force=True)`` ``--repeat`` times in this process (the figure
   ``bench/seal.py`` reports as end to end), and once in a fresh process.
3. Export: ``build_summary`` + ``write_export`` of the newest seal, as ``tpmledger summary
   export`` does (into ``--export-dir`` if given, kept for A/B runs of two source trees).
4. Verify, ``--repeat`` times each: the reference recomputation alone (canonical form,
   figures, leaves, root), ``verify_export`` (every check) in this process, and
   ``tpmledger summary verify`` in a fresh process (imports included) with that process's
   peak RSS (VmHWM, read by the process itself: a forked child would otherwise inherit
   this process's high-water mark).
5. For comparison only: the analytics engine on the same file (``read_events`` +
   ``fold_events``, the seal's walk as one chunk), which the verifier does not use (it
   must not repeat the sealer).

Prints best-of-``--repeat`` times and verify / seal against the target (README.md and
issue 15: offline verify of a 1 M export ≤ 3 × the seal time of the same run).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from seal_workload import RUN_ID, load, seal_peak_rss  # the seal bench's run

from tpmledger.analytics.kernels.run_figures import RunContext
from tpmledger.analytics.proofs.summary_export import build_summary, write_export
from tpmledger.analytics.seal.memory_run import fold_events
from tpmledger.analytics.seal.run_computation import in_seal_view
from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.provenance.event_file import read_events
from tpmledger.provenance.signing_keys import SigningKey
from tpmledger.provenance.summary_recompute import recompute_from_events
from tpmledger.provenance.summary_verify import verify_export
from tpmledger.storage.server import migrate

TARGET_RATIO = 3.0

# `tpmledger summary verify DIR` as its console script runs it, then the process's own peak.
_VERIFY_IN_A_FRESH_PROCESS = """
import sys, time
started = time.perf_counter()
from tpmledger.cli.main import main
code = main(["summary", "verify", sys.argv[1]])
took = time.perf_counter() - started
peak = next(l.split()[1] for l in open("/proc/self/status") if l.startswith("VmHWM:"))
print(code, took, int(peak) // 1024, file=sys.stderr)
"""


def best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    """The shortest wall time of ``repeat`` calls, and the last call's result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def fresh_process(code: str, *args: str) -> list[str]:
    """Run ``code`` in a new interpreter; the fields it printed last on stderr."""
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    return done.stderr.splitlines()[-1].split()


def _database() -> tuple[str, Any, Path | None]:
    """The server's URL, the embedded server started (else None) and its data directory."""
    url = os.environ.get("TPMLEDGER_DATABASE_URL")
    if url:
        return url, None, None
    from tpmledger.storage.server.embedded_postgres import EmbeddedPostgres

    data_dir = Path(tempfile.mkdtemp(prefix="tpmledger-bench-verify-"))
    server = EmbeddedPostgres(data_dir)
    return server.start(), server, data_dir


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--export-dir", type=Path, default=None, help="keep the export here")
    args = parser.parse_args()

    def say(label: str, value: str) -> None:
        print(f"{label:<66} {value}", flush=True)

    print(f"# tpmledger offline summary verification — {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, Polars {pl.__version__}; load average {os.getloadavg()}"
    )
    url, server, data_dir = _database()
    try:
        migrate.upgrade(url)
        started = time.perf_counter()
        load(url, args.attempts, args.shards)
        print(
            f"run: {args.attempts:,} attempts, {args.shards} shards (bench/seal.py's), loaded in "
            f"{time.perf_counter() - started:.1f} s (not timed below)"
        )

        seal_s, sealed = best_of(args.repeat, lambda: seal_run(url, RUN_ID, force=True))
        say(f"seal_run, force (this process, best of {args.repeat})", f"{seal_s:8.3f} s")
        peak, took = seal_peak_rss(url, RUN_ID)
        say("seal_run, force (fresh process, imports included)", f"{float(took):8.3f} s")
        say("  its peak RSS", f"{int(peak):8,} MiB")
        say(
            "  seal digests",
            f"events_sha256 {sealed.document['events']['sha256'][:16]}…, "
            f"merkle_root {sealed.document['minutes']['merkle_root'][:16]}…",
        )

        key = SigningKey(Ed25519PrivateKey.generate(), Path("bench.key"))
        with tempfile.TemporaryDirectory() as tmp:
            out = args.export_dir or Path(tmp) / "export"
            started = time.perf_counter()
            # The event file streams to the export folder (build_summary writes no copy).
            summary = in_seal_view(url, build_summary, RUN_ID, key, events_to=out / "events.jsonl")
            write_export(summary, out)
            say("export (build_summary + write_export)", f"{time.perf_counter() - started:8.3f} s")
            events = out / "events.jsonl"
            size = events.stat().st_size
            say("events.jsonl", f"{size / 1e6:8.1f} MB")

            recompute_s, _ = best_of(
                args.repeat, lambda: recompute_from_events(events.read_bytes())
            )
            say(
                "reference recompute (file read, canonical, figures, leaves, root)",
                f"{recompute_s:8.3f} s",
            )
            verify_s, report = best_of(args.repeat, lambda: verify_export(out))
            say("verify_export (all checks, this process)", f"{verify_s:8.3f} s")
            checks = ", ".join(f"{c.name}={'pass' if c.ok else 'FAIL'}" for c in report.checks)
            print(f"  checks: {checks}")
            runs = [fresh_process(_VERIFY_IN_A_FRESH_PROCESS, str(out)) for _ in range(args.repeat)]
            code, cli_s, cli_peak = min(runs, key=lambda r: float(r[1]))
            say("`tpmledger summary verify` (fresh process, best)", f"{float(cli_s):8.3f} s")
            say("  its exit code and peak RSS", f"{code}, {int(cli_peak):,} MiB")
            ratio = float(cli_s) / seal_s
            verdict = "met" if ratio <= TARGET_RATIO else "NOT met"
            say("verify / seal (target <= 3)", f"{ratio:8.2f}  {verdict}")

            engine_s, _ = best_of(
                args.repeat, lambda: fold_events(read_events(events), RunContext(RUN_ID))
            )
            say("for comparison: read_events + fold_events", f"{engine_s:8.3f} s")
        print(f"load average after: {os.getloadavg()} (the machine is shared; wall times vary)")
        print(
            f"command: .venv/bin/python bench/summary_verify.py --attempts {args.attempts} "
            f"--shards {args.shards} --repeat {args.repeat}"
        )
    finally:
        if server is not None:
            server.stop()
        if data_dir is not None:
            shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
