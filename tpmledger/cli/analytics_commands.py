"""``tpmledger analyze|snapshots|verify|events|sweep`` (docs/metrics.md)."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any

from tpmledger.cli.database_option import add_data_dir_option, database, settings_from_args

EXIT_MISMATCH = 1
EXIT_UNKNOWN = 2


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "analyze",
        help="seal a run now (if it changed) and print its figures",
        description="Recompute a run from the database, seal a new snapshot version when "
        "its events or figures changed, and print the run object of GET /v1/runs/RUN. The "
        "run is read a chunk of minutes at a time (docs/provenance.md#streaming-seal); for "
        "a run of a million attempts or more a progress line shows on a terminal.",
    )
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("--json", action="store_true", help="print the GET /v1/runs/RUN object")
    p.add_argument("--force", action="store_true", help="seal a new version even if unchanged")
    p.add_argument(
        "--slo",
        metavar="LIMITS",
        default=None,
        help="also store and print goodput under this SLO, e.g. ttft=0.5,latency=10 "
        "(seconds; default: $TPMLEDGER_SLO; docs/metrics.md#goodput)",
    )
    _common(p, run_analyze)

    p = subparsers.add_parser(
        "snapshots",
        help="list a run's sealed snapshot versions",
        description="Every sealed version of RUN: seal, previous seal, events digest, Merkle root.",
    )
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("--json", action="store_true", help="print JSON")
    _common(p, run_snapshots)

    p = subparsers.add_parser(
        "verify",
        help="recompute a run from the database and compare with its newest seal",
        description="Check the seal chain, then recompute events digest, Merkle root, run "
        "figures and every minute row; each mismatch is printed (minute, field, sealed vs "
        "recomputed). Exit 0 when everything matches, 1 on any mismatch, 2 if not sealed.",
    )
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    _common(p, run_verify)

    p = subparsers.add_parser(
        "events",
        help="write a run's canonical event file (events.jsonl) to stdout",
        description="The canonical event file (docs/provenance.md); "
        "`tpmledger events RUN | sha256sum` equals the events_sha256 of a snapshot sealed "
        "from the same data.",
    )
    p.add_argument("run_id", metavar="RUN")
    _common(p, run_events)

    p = subparsers.add_parser(
        "sweep",
        help="cap sweep: figures per cap and the knee (recommended cap)",
        description="Runs sharing tpmledger.sweep.id, from their latest sealed snapshots. "
        "A cap is accepted while throughput rises by more than --min-throughput-gain, retry "
        "rate rises by at most --max-retry-rise and call success rate falls by at most "
        "--max-success-drop against the previous cap; the knee is the last accepted cap.",
    )
    p.add_argument("sweep_id", metavar="SWEEP_ID")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--min-throughput-gain", type=float, default=0.02, help="default 0.02 (2 %%)")
    p.add_argument("--max-retry-rise", type=float, default=0.01, help="default 0.01 (1 point)")
    p.add_argument("--max-success-drop", type=float, default=0.005, help="default 0.005")
    _common(p, run_sweep)


def _common(p: argparse.ArgumentParser, func: Any) -> None:
    add_data_dir_option(p)
    p.set_defaults(func=func)


# Run facts the run simply does not have (not figures that could not be measured).
_ABSENT_MEANS_NONE = frozenset({"sweep_id", "declared_shard_count", "concurrency_cap"})


def _shown(value: Any) -> Any:
    return "not measured" if value is None else value


def _print_object(obj: dict[str, Any], indent: str = "") -> None:
    for key, value in obj.items():
        if isinstance(value, dict):
            print(f"{indent}{key}:")
            _print_object(value, indent + "  ")
        elif value is None and key in _ABSENT_MEANS_NONE:
            print(f"{indent}{key}: none")
        else:
            print(f"{indent}{key}: {_shown(value)}")


class SealProgress:
    """A progress line on stderr while a large run is sealed (a terminal only; it is
    rewritten in place and cleared at the end). Runs under a million attempts seal in a
    few seconds and print nothing."""

    def __init__(self, run_id: str, min_attempts: int = 1_000_000) -> None:
        self.run_id = run_id
        self.min_attempts = min_attempts
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if total < self.min_attempts or not sys.stderr.isatty():
            return
        share = min(done / total, 1.0)
        print(
            f"\rsealing {self.run_id}: {done:,} of {total:,} attempts read ({share:.0%})",
            end="",
            file=sys.stderr,
            flush=True,
        )
        self.shown = True

    def finish(self) -> None:
        """End the progress line (if one was shown)."""
        if self.shown:
            print(file=sys.stderr, flush=True)
            self.shown = False


def run_analyze(args: argparse.Namespace) -> int:
    from tpmledger.analytics.kernels.run_span_limit import RunTooLong
    from tpmledger.analytics.seal.compile_notice import ensure_kernels
    from tpmledger.analytics.seal.run_computation import UnknownRun
    from tpmledger.analytics.seal.sealing import seal_run
    from tpmledger.analytics.views.run_extras import reconciliation, run_extras
    from tpmledger.analytics.views.target_views import targets_object
    from tpmledger.slo import SloError, optional_slo
    from tpmledger.storage.server.database import read_view
    from tpmledger.storage.writers.retention_store import RunArchived

    settings = settings_from_args(args)
    try:
        slo = optional_slo(args.slo if args.slo is not None else settings.slo)
    except SloError as exc:
        print(f"error: --slo: {exc}", file=sys.stderr)
        return EXIT_UNKNOWN
    ensure_kernels()  # a line on stderr if they must be compiled (first run only)
    with database(settings, migrate_to_head=True) as url:
        progress = SealProgress(args.run_id)
        try:
            result = seal_run(
                url,
                args.run_id,
                force=args.force,
                quiet_s=settings.reseal_quiet_s,
                slo=slo,
                progress=progress,
            )
        except (UnknownRun, RunTooLong, RunArchived) as exc:
            progress.finish()
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_UNKNOWN
        progress.finish()
        # Diagnostics and goodput are stored beside the version (docs/metrics.md#diagnostics).
        with read_view(url) as session:
            extras = run_extras(session, result.run_id, result.version, slo.text if slo else None)
            tokens = result.metrics.get("tokens")
            extras["reconciliation"] = reconciliation(session, result.run_id, tokens)
            extras["targets"] = targets_object(session, result.run_id)["targets"]
    metrics = {**result.metrics, **extras}
    if args.json:
        print(json.dumps(metrics, indent=2))
        return 0
    state = "sealed new version" if result.created else "unchanged; newest version"
    print(f"{state} {result.version} of {result.run_id} (seal {result.seal})")
    if not result.final:
        print(
            "note: the run was still receiving data, so this version is provisional: a cap "
            "sweep keeps showing the run as live until the analytics worker seals it once "
            "quiet (docs/metrics.md#live-figures)"
        )
    targets = metrics.pop("targets")
    _print_object(metrics)
    _print_targets(targets)
    return 0


def _print_targets(targets: list[dict[str, Any]]) -> None:
    """One line per target: minutes, lowest headroom, rate-limited attempts
    (the minutes themselves: ``--json`` or GET /v1/runs/RUN/targets)."""
    for target in targets:
        minutes = target["minutes"]
        lowest = [
            m[k]
            for m in minutes
            for k in ("headroom_tokens", "headroom_requests")
            if m[k] is not None
        ]
        print(
            f"target {target['provider'] or '-'}/{target['model'] or '-'}: {len(minutes)} minutes, "
            f"lowest quota headroom {_shown(min(lowest)) if lowest else 'not measured'}, "
            f"rate limited {sum(m['rate_limited'] for m in minutes)}"
        )


def run_snapshots(args: argparse.Namespace) -> int:
    from tpmledger.storage.codecs.time_text import minute_text
    from tpmledger.storage.readers.snapshots_read import list_snapshots
    from tpmledger.storage.server.database import read_view

    with database(settings_from_args(args), migrate_to_head=True) as url, read_view(url) as session:
        rows = list_snapshots(session, args.run_id)
    if args.json:
        print(json.dumps({"run_id": args.run_id, "snapshots": rows}, indent=2, default=str))
        return 0
    if not rows:
        print(
            f"{args.run_id}: no sealed snapshot "
            f"(run `tpmledger analyze {shlex.quote(args.run_id)}`)"
        )
        return EXIT_UNKNOWN
    for r in rows:
        print(
            f"v{r['version']}  {minute_text(r['computed_at'])}  seal {r['seal']}  "
            f"previous {r['previous_seal'] or '-'}  events {r['events_count']} "
            f"sha256 {r['events_sha256']}  merkle {r['merkle_root']} ({r['tree_size']} min)"
        )
    return 0


def run_verify(args: argparse.Namespace) -> int:
    from tpmledger.analytics.proofs.verification import NotSealed, verify_run
    from tpmledger.analytics.seal.run_computation import UnknownRun, in_seal_view

    with database(settings_from_args(args), migrate_to_head=True) as url:
        try:
            report = in_seal_view(url, verify_run, args.run_id)
        except (NotSealed, UnknownRun) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_UNKNOWN
    if args.json:
        body = {
            "run_id": report.run_id,
            "version": report.version,
            "seal": report.seal,
            "ok": report.ok,
            "mismatches": [m.__dict__ for m in report.mismatches],
            "notes": report.notes,
        }
        print(json.dumps(body, indent=2, default=str))
    else:
        for m in report.mismatches:
            print(f"MISMATCH {m}")
        for note in report.notes:
            print(f"note: {note}")
        verdict = "OK" if report.ok else f"FAILED ({len(report.mismatches)} mismatches)"
        print(f"{report.run_id} v{report.version} seal {report.seal}: {verdict}")
    return 0 if report.ok else EXIT_MISMATCH


def run_events(args: argparse.Namespace) -> int:
    from tpmledger.analytics.proofs.run_events import RunEventFile
    from tpmledger.analytics.seal.run_computation import UnknownRun, seal_view

    with database(settings_from_args(args), migrate_to_head=True) as url:
        try:
            # Streamed: memory follows a chunk.
            with seal_view(url) as view, RunEventFile(view.conn, args.run_id) as file:
                file.write_to(sys.stdout.buffer.write)
        except UnknownRun as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_UNKNOWN
    sys.stdout.buffer.flush()
    return 0


def run_sweep(args: argparse.Namespace) -> int:
    from tpmledger.analytics.verdicts.cap_sweep import SweepThresholds, load_sweep, walk_label
    from tpmledger.storage.server.database import in_one_snapshot

    rule = SweepThresholds(args.min_throughput_gain, args.max_retry_rise, args.max_success_drop)
    with database(settings_from_args(args), migrate_to_head=True) as url:
        result = in_one_snapshot(url, load_sweep, args.sweep_id, rule)
    if args.json:
        print(json.dumps(result.as_dict(), indent=2))
        return 0
    print(f"sweep {result.sweep_id}: thresholds {json.dumps(rule.as_dict())}")
    for p in result.points:
        print(
            f"  cap {p.cap:>4}  {p.status:<6}  sustained_tpm_total "
            f"{_shown(p.sustained_tpm_total)}  retry_rate {_shown(p.retry_rate)}  "
            f"call_success_rate {_shown(p.call_success_rate)}  ttft_p95_s "
            f"{_shown(p.ttft_p95_s)}  {walk_label(p)}"
        )
    for run_id in result.skipped_run_ids:
        print(f"  skipped {run_id}: no concurrency cap declared or not sealed yet")
    knee = result.knee_cap if result.knee_cap is not None else "not measured"
    if result.provisional:
        live = ", ".join(str(p.cap) for p in result.points if p.status == "live")
        print(f"knee (recommended cap): {knee} — provisional: cap(s) {live} still live")
    else:
        print(f"knee (recommended cap): {knee}")
    return 0
