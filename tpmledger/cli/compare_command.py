"""``tpmledger compare RUN_A RUN_B [--json] [--slo …]`` (docs/metrics.md#compare)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from tpmledger.cli.database_option import add_data_dir_option, database, settings_from_args

EXIT_UNKNOWN = 2

_ORDER = (
    "sustained_tpm_total",
    "sustained_completion_tpm",
    "retry_rate",
    "stall_rate",
    "call_success_rate",
    "ttft_p95_s",
    "goodput_tpm_total",
    "good_call_share",
)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "compare",
        help="compare two runs (B against baseline A): differences, intervals, verdict",
        description="Compare the newest sealed versions of RUN_A (baseline) and RUN_B "
        "(candidate) over the minutes strictly between each run's first and last: sustained "
        "TPM, retry rate, stall rate, call success rate, TTFT p95 and (with an SLO) goodput, "
        "each B - A with a seeded bootstrap interval over minutes, and the verdict improved, "
        "moved_the_bottleneck, regressed or inconclusive with the rule that produced it "
        "(docs/metrics.md#compare). With an SLO whose goodput a run's version lacks, that "
        "run is analyzed first (as `tpmledger analyze RUN --slo`).",
    )
    p.add_argument("run_a", metavar="RUN_A", help="baseline run id")
    p.add_argument("run_b", metavar="RUN_B", help="candidate run id")
    p.add_argument("--json", action="store_true", help="print the GET /v1/compare object")
    p.add_argument(
        "--slo",
        metavar="LIMITS",
        default=None,
        help="goodput SLO in seconds, e.g. ttft=0.5,latency=10 (default: $TPMLEDGER_SLO)",
    )
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples (2000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (0)")
    add_data_dir_option(p)
    p.set_defaults(func=run_compare)


def _number(value: Any) -> str:
    if value is None:
        return "not measured"
    if isinstance(value, float) and abs(value) < 10:
        return f"{value:.4g}"
    return f"{value:,.0f}" if isinstance(value, int | float) else str(value)


def _signed(value: Any) -> str:
    text = _number(value)
    return text if value is None or text.startswith("-") else f"+{text}"


def print_result(result: dict[str, Any]) -> None:
    """The human form: a figure table, the verdict, its rule and the parameters."""
    snaps = result["snapshots"]
    print(
        f"compare {result['a']} (baseline, v{snaps['a']['version']}, "
        f"{snaps['a']['inner_minutes']} inner minutes) -> {result['b']} (candidate, "
        f"v{snaps['b']['version']}, {snaps['b']['inner_minutes']} inner minutes)"
    )
    header = ("figure", "A", "B", "B - A", "95 % interval")
    print(f"  {header[0]:<26}{header[1]:>14}{header[2]:>14}{header[3]:>14}  {header[4]}")
    for name in _ORDER:
        entry = result["figures"].get(name)
        if entry is None:
            continue
        interval = entry["interval"]
        shown = f"[{_signed(interval[0])}, {_signed(interval[1])}]" if interval else "not measured"
        print(
            f"  {name:<26}{_number(entry['a']):>14}{_number(entry['b']):>14}"
            f"{_signed(entry['difference']):>14}  {shown}"
        )
    print(f"verdict: {result['verdict']}")
    print(f"rule: {result['rule']}")
    own = result["bottlenecks"]
    print(
        f"own bottleneck verdicts: A {own['a']['verdict'] or 'not measured'}, "
        f"B {own['b']['verdict'] or 'not measured'}"
    )
    params = result["params"]
    print(
        f"params: resamples {params['resamples']}, seed {params['seed']}, confidence "
        f"{params['confidence']}, min_minutes {params['min_minutes']}, slo "
        f"{params['slo'] or 'none'}; rises/falls beyond its interval = the whole "
        "interval above/below 0"
    )


def _ensure_goodput(url: str, run_id: str, slo: Any, quiet_s: float) -> None:
    """Analyze ``run_id`` under ``slo`` when its newest version lacks that goodput."""
    from tpmledger.analytics.seal.sealing import seal_run
    from tpmledger.storage.readers.snapshots_read import latest_snapshot
    from tpmledger.storage.server.database import read_view
    from tpmledger.storage.writers.sealed_figures_store import read_goodput

    with read_view(url) as session:
        snapshot = latest_snapshot(session, run_id)
        if snapshot is not None and read_goodput(session, run_id, snapshot.version, slo.text):
            return
    print(f"analyzing {run_id} for goodput under {slo.text}", file=sys.stderr)
    seal_run(url, run_id, quiet_s=quiet_s, slo=slo)


def run_compare(args: argparse.Namespace) -> int:
    from tpmledger.analytics.verdicts.compare_runs import CompareParams, NotComparable, compare_runs
    from tpmledger.slo import SloError, optional_slo
    from tpmledger.storage.readers.runs_read import UnknownRun
    from tpmledger.storage.server.database import in_one_snapshot

    settings = settings_from_args(args)
    try:
        slo = optional_slo(args.slo if args.slo is not None else settings.slo)
    except SloError as exc:
        print(f"error: --slo: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    if args.resamples < 100:
        print("error: --resamples must be at least 100", file=sys.stderr)
        return EXIT_UNKNOWN
    params = CompareParams(resamples=args.resamples, seed=args.seed)
    with database(settings, migrate_to_head=True) as url:
        try:
            if slo is not None:
                for run_id in (args.run_a, args.run_b):
                    _ensure_goodput(url, run_id, slo, settings.reseal_quiet_s)
            result = in_one_snapshot(
                url, compare_runs, args.run_a, args.run_b, params, slo.text if slo else None
            )
        except (UnknownRun, NotComparable) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_UNKNOWN
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_result(result)
    return 0
