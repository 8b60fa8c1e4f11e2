"""What the quota-headroom read costs (docs/metrics.md#quota-headroom, #bottleneck).

    .venv/bin/python bench/targets.py [--sizes 100000,1000000] [--repeat 5]

For each size, a generated run (``bench/seal_workload.py``: 8 shards × cap 16, 2 % rate
limits) is loaded into a fresh database (``TPMLEDGER_DATABASE_URL``'s server, else an
embedded pgserver) and timed, median of ``--repeat``:

- *aggregate*: the target-minute ``GROUP BY`` over every attempt of the run
  (``fetch_target_minutes``): what a seal adds, and what a never-sealed run's read costs;
- *sealed read*: ``target_minutes`` once the run is sealed (the version's stored
  target-minutes; no attempt scanned), as ``GET /v1/runs/{id}/targets`` and the run page read;
- *run object*: ``GET /v1/runs/{id}``'s composition with the bottleneck, sealed.

Prints each figure, the largest size's over the smallest's (the aggregate should follow the
attempts, the sealed reads stay flat) and this process's peak RSS (VmHWM).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from seal_workload import load  # the generated run shared with bench/seal.py

from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.analytics.verdicts.bottleneck import run_object_with_bottleneck
from tpmledger.storage.readers.target_minutes import fetch_target_minutes, target_minutes
from tpmledger.storage.server import migrate
from tpmledger.storage.server.database import raw_transaction, read_view


def _database() -> tuple[str, Any]:
    url = os.environ.get("TPMLEDGER_DATABASE_URL")
    if url:
        return url, None
    from tpmledger.storage.server.embedded_postgres import EmbeddedPostgres

    server = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="tpmledger-bench-targets-")))
    return server.start(), server


def _median_ms(call: Callable[[], Any], repeat: int) -> float:
    call()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return statistics.median(samples)


def _peak_rss_mib() -> int:
    with open("/proc/self/status") as status:
        return int(next(x for x in status if x.startswith("VmHWM:")).split()[1]) // 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    url, server = _database()
    try:
        migrate.upgrade(url)
        figures: dict[int, dict[str, float]] = {}
        for size in sizes:
            run_id = f"bench_targets_{size}"
            load(url, size, 8, run_id=run_id)

            def aggregate(run_id: str = run_id) -> None:
                with raw_transaction(url) as conn:
                    fetch_target_minutes(conn, [run_id])

            full = _median_ms(aggregate, args.repeat)
            seal_run(url, run_id, force=True)

            def sealed(run_id: str = run_id) -> None:
                with read_view(url) as session:
                    target_minutes(session, [run_id])

            def run_object(run_id: str = run_id) -> None:
                with read_view(url) as session:
                    run_object_with_bottleneck(session, run_id)

            figures[size] = {
                "aggregate": full,
                "sealed read": _median_ms(sealed, args.repeat),
                "run object": _median_ms(run_object, args.repeat),
            }
        load_avg = " ".join(f"{x:.2f}" for x in os.getloadavg())
        print(f"# .venv/bin/python bench/targets.py --sizes {args.sizes} --repeat {args.repeat}")
        print(f"# Python {platform.python_version()}, load average {load_avg}")
        for size, row in figures.items():
            shown = ", ".join(f"{k} {v:,.1f} ms" for k, v in row.items())
            print(f"{size:>10,} attempts: {shown}")
        small, large = figures[sizes[0]], figures[sizes[-1]]
        ratios = ", ".join(f"{k} {large[k] / small[k]:.2f}×" for k in small)
        print(f"{sizes[-1]:,} / {sizes[0]:,} attempts: {ratios}")
        print(f"peak RSS of this process: {_peak_rss_mib()} MiB")
    finally:
        if server is not None:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
