"""Server time of every dashboard callback on a sealed 1,000,000-attempt run (README.md#benchmarks).

    .venv/bin/python bench/dashboard_callbacks.py [--attempts 1000000] [--shards 8]
                                                  [--repeat 20] [--out FILE]

1. A fresh, migrated database (``TPMLEDGER_DATABASE_URL``'s server, else an embedded
   pgserver in a temp dir).
2. The run of ``bench/seal.py`` (8 shards × cap 16, retries, queue waits, TTFT) is generated,
   COPYed into ``attempts`` and sealed once with ``analytics.sealing.seal_run``, so the
   snapshot and minute tables are exactly what the worker would write. Not timed. The run
   is given a sweep id so the sweep callback has something to draw.
3. Each callback is timed ``--repeat`` times two ways, reporting median and p95 in ms:
   - *function*: the page's server-side function (database reads + figure build);
   - *HTTP*: a full ``POST /_dash-update-component`` through Flask's test client (the
     request Dash's front end sends: dispatch, callback, JSON serialization).
   Target (README.md#benchmarks): ≤ 300 ms server time per callback.
4. With ``--wide-minutes N`` (default 1,440) the run page callbacks are timed again on a
   run whose minute tables are built directly: N minutes × ``--shards`` shards (a day of
   one-minute buckets), the same snapshot figures. It shows how cost grows with minutes,
   the only thing the pages' cost depends on.
"""

from __future__ import annotations

import argparse
import json
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

import seal_workload as seal_bench  # the 1M-attempt generator bench/seal.py uses

from tpmledger.analytics.seal.sealing import seal_run
from tpmledger.dashboard.app import create_app
from tpmledger.dashboard.config import DashboardConfig
from tpmledger.dashboard.pages.run_panels import run_panels, throughput_view
from tpmledger.dashboard.pages.runs import runs_table_view
from tpmledger.dashboard.pages.sweep import sweep_panels
from tpmledger.durations import MINUTE_NS
from tpmledger.storage.server import migrate
from tpmledger.storage.server.database import raw_transaction

RUN_ID = seal_bench.RUN_ID
WIDE_RUN_ID = "bench_dashboard_wide"
SWEEP_ID = "bench_sweep"
TARGET_MS = 300.0
RESULTS = Path(__file__).resolve().parent / "results" / "dashboard_callbacks.txt"


def _database() -> tuple[str, Any]:
    url = os.environ.get("TPMLEDGER_DATABASE_URL")
    if url:
        return url, None
    from tpmledger.storage.server.embedded_postgres import EmbeddedPostgres

    server = EmbeddedPostgres(Path(tempfile.mkdtemp(prefix="tpmledger-bench-dashboard-")))
    return server.start(), server


def _times_ms(call: Callable[[], Any], repeat: int) -> tuple[float, float]:
    call()  # warm: connection pool, plotly validators
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        call()
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    p95 = samples[min(len(samples) - 1, round(0.95 * (len(samples) - 1)))]
    return statistics.median(samples), p95


def _dash_body(
    outputs: list[tuple[str, str]],
    inputs: list[tuple[str, str, Any]],
    state: list[tuple[str, str, Any]] = (),
) -> dict[str, Any]:  # type: ignore[assignment]
    """The JSON body Dash's renderer POSTs for one callback."""
    out = [{"id": i, "property": p} for i, p in outputs]
    output = (
        f"{outputs[0][0]}.{outputs[0][1]}"
        if len(outputs) == 1
        else ".." + "...".join(f"{i}.{p}" for i, p in outputs) + ".."
    )
    return {
        "output": output,
        "outputs": out[0] if len(out) == 1 else out,
        "inputs": [{"id": i, "property": p, "value": v} for i, p, v in inputs],
        "state": [{"id": i, "property": p, "value": v} for i, p, v in state],
        "changedPropIds": [f"{inputs[0][0]}.{inputs[0][1]}"],
    }


RUN_OUTPUTS = [
    ("run-header", "children"), ("run-kpis", "children"), ("run-concurrency-graph", "figure"),
    ("run-work-conserving", "children"), ("run-ttft-graph", "figure"),
    ("run-balance-graph", "figure"), ("run-provenance-panel", "children"),
    ("run-body", "style"), ("run-refresh", "max_intervals"), ("run-refreshed", "data"),
]  # fmt: skip


def build_wide_run(url: str, minutes: int, shards: int) -> None:
    """A run with ``minutes`` × ``shards`` minute rows (plus whole-run rows), built in SQL.

    It reuses the sealed run's snapshot figures; only the minute tables differ.
    """
    shard_ids = ["*", *(str(s) for s in range(shards))]
    with raw_transaction(url) as conn:
        conn.execute(
            "INSERT INTO runs (run_id, first_event_ns, last_event_ns, shard_ids, "
            "declared_shard_count, concurrency_cap, attempts, updated_at) "
            "SELECT %s, first_event_ns, first_event_ns + %s * %s, shard_ids, "
            "declared_shard_count, concurrency_cap, attempts, now() - interval '1 hour' "
            "FROM runs WHERE run_id = %s",
            (WIDE_RUN_ID, minutes, MINUTE_NS, RUN_ID),
        )
        conn.execute(
            "INSERT INTO snapshots SELECT %s, version, computed_at, "
            "encode(sha256(convert_to(seal || 'wide', 'UTF8')), 'hex'), previous_seal, "
            "events_sha256, events_count, merkle_root, %s, metrics_sha256, document, metrics, "
            "now() - interval '1 hour' FROM snapshots WHERE run_id = %s",
            (WIDE_RUN_ID, minutes, MINUTE_NS, RUN_ID),
        )
        conn.execute(
            """
            INSERT INTO minute_metrics (run_id, version, shard_id, minute_utc, calls_in_minute,
                prompt_tpm_in, completion_tpm_out, tpm_total, successes, failures, retries,
                retry_rate, success_rate, ttft_p50_s, ttft_p95_s, ttft_p99_s, in_flight_mean,
                in_flight_max, queue_depth_mean, queue_depth_max, concurrency_cap, shards_active)
            SELECT %(run)s, 1, s, timestamptz '2026-02-01 00:00Z' + m * interval '1 minute',
                240, 260000 + m %% 97, 95000 + m %% 89, 355000 + m %% 97 + m %% 89, 236, 4, 3,
                0.0125, 0.983, 0.30, 0.52, 0.55, 14.5, 16, 2.1, 9,
                CASE WHEN s = '*' THEN 16 * %(shards)s ELSE 16 END,
                CASE WHEN s = '*' THEN %(shards)s ELSE 1 END
            FROM generate_series(0, %(minutes)s - 1) AS m, unnest(%(shard_ids)s::text[]) AS s
            """,
            {"run": WIDE_RUN_ID, "minutes": minutes, "shards": shards, "shard_ids": shard_ids},
        )


Case = tuple[str, Callable[[], Any], dict[str, Any]]


def _run_cases(config: DashboardConfig, run_id: str, label: str) -> list[Case]:
    """The run page's callbacks on ``run_id``: refresh, then each token type."""
    cases: list[Case] = [
        (
            f"run page{label}: refresh_run (KPIs, concurrency, TTFT, balance, provenance)",
            lambda: run_panels(config, run_id),
            _dash_body(
                RUN_OUTPUTS, [("run-refresh", "n_intervals", 1)], [("run-id", "data", run_id)]
            ),
        )
    ]
    for token in ("total", "prompt", "completion"):
        cases.append(
            (
                f"run page{label}: switch_token_type ({token})",
                lambda token=token: throughput_view(config, run_id, token),  # type: ignore[misc]
                _dash_body(
                    [("run-throughput-graph", "figure")],
                    [("run-token-type", "value", token), ("run-refreshed", "data", 1)],
                    [("run-id", "data", run_id)],
                ),
            )
        )
    return cases


def _cases(config: DashboardConfig, wide_label: str | None) -> list[Case]:
    """(name, server-side function, Dash request body) per callback."""
    sweep_outputs = [("sweep-graph", "figure"), ("sweep-summary", "children"),
                     ("sweep-table", "children")]  # fmt: skip
    cases: list[Case] = [
        (
            "runs page: refresh_runs",
            lambda: runs_table_view(config),
            _dash_body([("runs-table", "children")], [("runs-refresh", "n_intervals", 1)]),
        ),
        *_run_cases(config, RUN_ID, ""),
        (
            "sweep page: draw_sweep",
            lambda: sweep_panels(config, SWEEP_ID),
            _dash_body(sweep_outputs, [("sweep-select", "value", SWEEP_ID)]),
        ),
    ]
    if wide_label is not None:
        cases += _run_cases(config, WIDE_RUN_ID, wide_label)
    return cases


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--wide-minutes", type=int, default=1_440, help="0 to skip")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    lines: list[str] = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    url, server = _database()
    try:
        migrate.upgrade(url)
        started = time.perf_counter()
        seal_bench.load(url, args.attempts, args.shards)
        with raw_transaction(url) as conn:
            conn.execute("UPDATE runs SET sweep_id = %s WHERE run_id = %s", (SWEEP_ID, RUN_ID))
        result = seal_run(url, RUN_ID)
        with raw_transaction(url) as conn:
            minute_rows, minutes = conn.execute(
                "SELECT count(*), count(DISTINCT minute_utc) FROM minute_metrics "
                "WHERE run_id = %s AND version = %s",
                (RUN_ID, result.version),
            ).fetchone()  # type: ignore[misc]
        say(f"# tpmledger dashboard callbacks — {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
        say(
            f"machine: {platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()} (shared with other jobs; figures are wall time)"
        )
        say(
            f"run: {result.metrics['attempts']:,} attempts, {args.shards} shards, {minutes} "
            f"minutes, {minute_rows:,} minute rows (v{result.version}); generated and sealed "
            f"in {time.perf_counter() - started:.1f} s (not timed below)"
        )
        wide_label = None
        if args.wide_minutes:
            build_wide_run(url, args.wide_minutes, args.shards)
            wide_label = f" [{args.wide_minutes:,} min x {args.shards} shards]"
            say(
                f"wide run: {args.wide_minutes:,} minutes x {args.shards} shards = "
                f"{args.wide_minutes * (args.shards + 1):,} minute rows, built directly"
            )
        config = DashboardConfig(database_url=url)
        app = create_app(url)
        client = app.server.test_client()
        client.get("/")  # Dash sets up its routes on the first request
        say(f"{'callback':<92} {'function ms':>18} {'HTTP ms':>18}")
        say(f"{'':<92} {'median / p95':>18} {'median / p95':>18}")
        worst = 0.0
        for name, function, body in _cases(config, wide_label):

            def post(body: dict[str, Any] = body) -> None:
                response = client.post(
                    "/_dash-update-component",
                    data=json.dumps(body),
                    content_type="application/json",
                )
                assert response.status_code == 200, response.get_data(as_text=True)[:500]

            f_med, f_p95 = _times_ms(function, args.repeat)
            h_med, h_p95 = _times_ms(post, args.repeat)
            worst = max(worst, h_p95)
            say(f"{name:<92} {f_med:>8.1f} / {f_p95:>6.1f} {h_med:>8.1f} / {h_p95:>6.1f}")
        verdict = "meets" if worst <= TARGET_MS else "MISSES"
        target = f"the {TARGET_MS:.0f} ms target (README.md#benchmarks)"
        say(f"worst HTTP p95: {worst:.1f} ms — {verdict} {target}")
        say(
            f"command: .venv/bin/python bench/dashboard_callbacks.py --attempts {args.attempts} "
            f"--repeat {args.repeat} --wide-minutes {args.wide_minutes}"
        )
    finally:
        if server is not None:
            server.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
