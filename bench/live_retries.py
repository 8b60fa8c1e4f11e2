"""Live updates of one busy minute whose calls retry: flags corrected in place, cost flat.

    .venv/bin/python bench/live_retries.py [--updates 12] [--batches 10]
                                           [--out bench/results/live_retries.txt]

Each update stores ``--batches`` ingest commits of 512 attempts, all ending in the same
minute (as bench/live.py's stream); half of each update's attempts are retries of calls
first seen in the previous update, so every update turns ~1,280 attempts already folded
into the minute's state into "not their call's last" (``has_later``) and moves their
retries. The live updater takes those out with their old flags and puts them back with
the new ones (analytics/live/minute_state.py). Printed per update: wall and CPU (this
process + PostgreSQL), attempts read, and the updater's peak RSS; the minute grows by
5,120 attempts per update, and the cost per update should not grow with it.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from live import BATCH, SECOND, _new_database, stream_batch
from seal import _postgres_cpu

from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.storage.schema.models import ATTEMPT_COPY_COLUMNS
from tpmledger.storage.server.database import get_engine, raw_transaction
from tpmledger.storage.server.embedded_postgres import EmbeddedPostgres
from tpmledger.storage.writers.bulk_writer import write_attempts

_AT = {c: i for i, c in enumerate(ATTEMPT_COPY_COLUMNS)}


def _commit(base_ns: int, second: int, retried: list[str], k: int) -> list[tuple[object, ...]]:
    """512 attempts ending in second ``second`` of the minute; even ones retry ``retried``."""
    rows = []
    for i, row in enumerate(stream_batch("busy", base_ns, second)):
        values = list(row)
        values[_AT["trace_id"]] = uuid.uuid4().bytes
        values[_AT["span_id"]] = uuid.uuid4().bytes[:8]
        values[_AT["call_id"]] = uuid.uuid4().hex
        if retried and i % 2 == 0:
            values[_AT["call_id"]] = retried[(k * BATCH + i) % len(retried)]
        rows.append(tuple(values))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=12)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("bench/results/live_retries.txt"))
    args = parser.parse_args()
    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    server = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="tpmledger-bench-retries-")))
    admin_url = server.start()
    say(f"# tpmledger live retries benchmark — {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    say(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}; load average {os.getloadavg()}"
    )
    try:
        url = _new_database(admin_url)
        updater = LiveUpdater(url)
        minute = (time.time_ns() - 600 * SECOND) // (60 * SECOND) * (60 * SECOND)
        base = minute + 3 * SECOND  # stream seconds 0-49 end inside this minute
        retried: list[str] = []
        costs, walls = [], []
        for u in range(args.updates):
            rows: list[tuple[object, ...]] = []
            with raw_transaction(url) as conn:
                for k in range(args.batches):
                    commit = _commit(base, (u * args.batches + k) % 50, retried, k)
                    write_attempts(conn, commit)
                    rows += commit
            retried = [str(r[_AT["call_id"]]) for i, r in enumerate(rows) if i % 2 == 1]
            pg0 = _postgres_cpu(server) or 0.0
            (update,) = updater.update_once()
            cpu = update.cpu_s + (_postgres_cpu(server) or 0.0) - pg0
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
            if u:  # the first update reads the new minute whole
                costs.append(cpu)
                walls.append(update.wall_s)
            say(
                f"  update {u + 1:>2}: minute holds {(u + 1) * len(rows):>7,} attempts; "
                f"{update.attempts_read:,} attempts read; wall {update.wall_s * 1000:.0f} ms, "
                f"CPU {cpu * 1000:.0f} ms; updater peak RSS {peak} MiB"
            )
        half = len(costs) // 2
        first, last = statistics.median(costs[:half]), statistics.median(costs[half:])
        say(
            f"  CPU per update, median of the first / last half: {first * 1000:.0f} / "
            f"{last * 1000:.0f} ms ({last / first:.2f}x)"
        )
        say(f"load average after: {os.getloadavg()} (the machine is shared; times vary)")
        say(
            "command: .venv/bin/python bench/live_retries.py "
            f"--updates {args.updates} --batches {args.batches}"
        )
        get_engine(url).dispose()
    finally:
        server.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
