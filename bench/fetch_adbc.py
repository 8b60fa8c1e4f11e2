"""The 1 M-attempt fetch: the hand-written binary COPY path against ADBC (docs/architecture.md).

    .venv/bin/pip install adbc-driver-postgresql   # not a dependency of tpmledger
    .venv/bin/python bench/fetch_adbc.py [--attempts 1000000] [--repeat 3]
                                         [--database-dir DIR] [--out FILE]

Loads the run ``bench/seal.py`` generates (or reuses it from ``--database-dir``), then
fetches every attempt of it into a Polars frame with the columns the seal reads, best of
``--repeat``, each way:

- ``hand, one backend``: :func:`storage.readers.attempt_frames.fetch_run_attempts` — binary COPY
  received through libpq and parsed by compiled code (ids as lowercase hex);
- ``hand, two backends``: the same split over two backends in one snapshot (what a seal
  of a run this large does);
- ``adbc``: ``adbc_driver_postgresql`` (its COPY-binary reader straight into Arrow) with
  the same columns, ids as bytea → binary, then ``pl.from_arrow``;
- ``adbc + hex ids``: the same plus turning the three id columns into the hex text the
  rest of tpmledger uses (Polars ``bin.encode('hex')``).

Prints wall seconds, this process's CPU seconds and the ratio of each to the hand path
with one backend, measured in the same run.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))

import seal  # bench/seal.py: its throwaway database (or the one kept in --database-dir)
import seal_workload  # the run bench/seal.py generates, and its loader

from tpmledger.storage.readers.attempt_frames import ATTEMPT_FRAME_SCHEMA, fetch_run_attempts
from tpmledger.storage.server import migrate
from tpmledger.storage.server.database import libpq_url, raw_transaction

RESULTS = Path("bench/results/fetch_adbc.txt")
ID_COLUMNS = ("trace_id", "span_id", "parent_span_id")


def _hand(url: str, split: bool) -> pl.DataFrame:
    with raw_transaction(url) as conn:
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        return fetch_run_attempts(conn, seal_workload.RUN_ID, split_url=url if split else None)


def _adbc(url: str, hex_ids: bool) -> pl.DataFrame:
    import adbc_driver_postgresql.dbapi as adbc

    columns = ", ".join(name for name in ATTEMPT_FRAME_SCHEMA)
    with adbc.connect(libpq_url(url)) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT {columns} FROM attempts WHERE run_id = $1", (seal_workload.RUN_ID,))
        frame = pl.from_arrow(cur.fetch_arrow_table())
    assert isinstance(frame, pl.DataFrame)
    if hex_ids:
        frame = frame.with_columns(pl.col(c).bin.encode("hex") for c in ID_COLUMNS)
    return frame


def _best(fetch: object, repeat: int) -> tuple[float, float, int]:
    best: tuple[float, float, int] | None = None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        frame = fetch()  # type: ignore[operator]
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        rows = frame.height
        del frame
        if best is None or wall < best[0]:
            best = (wall, cpu, rows)
    assert best is not None
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--database-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    url, server = seal._database(args.database_dir)
    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    try:
        migrate.upgrade(url)
        if not (
            args.database_dir is not None and seal_workload.run_stored(url, seal_workload.RUN_ID)
        ):
            seal_workload.load(url, args.attempts, args.shards)
        say(f"# fetch of one run: hand-written binary COPY vs ADBC — {time.strftime('%F %T %Z')}")
        say(
            f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
            f"; Python {platform.python_version()}, Polars {pl.__version__}"
        )
        import adbc_driver_postgresql

        say(f"adbc-driver-postgresql {adbc_driver_postgresql.__version__}")
        ways = {
            "hand, one backend": lambda: _hand(url, split=False),
            "hand, two backends": lambda: _hand(url, split=True),
            "adbc": lambda: _adbc(url, hex_ids=False),
            "adbc + hex ids": lambda: _adbc(url, hex_ids=True),
        }
        results = {name: _best(fetch, args.repeat) for name, fetch in ways.items()}
        base_wall, base_cpu, _ = results["hand, one backend"]
        for name, (wall, cpu, rows) in results.items():
            say(
                f"{name:<20} {wall:7.3f} s wall ({wall / base_wall:4.2f}x)  "
                f"{cpu:7.3f} s cpu ({cpu / base_cpu:4.2f}x)  {rows:,} rows"
            )
        say(f"command: .venv/bin/python bench/fetch_adbc.py --attempts {args.attempts}")
    finally:
        if server is not None:
            server.stop()  # type: ignore[attr-defined]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
