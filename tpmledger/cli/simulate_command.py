"""``tpmledger simulate``: a simulated shard fleet exporting OTLP spans to tpmledger.

Defaults follow the environment the background pipelines use (``SHARD_COUNT``,
``LLM_CONCURRENCY``, ``LLM_RETRY_BACKOFF_S``) and the standard OTLP exporter variables
(``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_PROTOCOL``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from tpmledger.simulator.fleet import FleetConfig, FleetResult

# The simulator (its LLM server, exporters, pydantic models) is imported when the command
# runs: every `tpmledger` process builds this parser, and `tpmledger --help` must be quick.

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(text: str) -> float:
    """``30s``, ``5m``, ``1h``, ``250ms`` or plain seconds → seconds."""
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (try 30s, 5m, 1h)")
    scale = {"ms": 0.001, "s": 1.0, None: 1.0, "m": 60.0, "h": 3600.0}[match.group(2)]
    seconds = float(match.group(1)) * scale
    if seconds <= 0:
        raise argparse.ArgumentTypeError("duration must be positive")
    return seconds


def _caps(text: str) -> list[int]:
    from tpmledger.simulator.sweep import parse_caps

    try:
        return parse_caps(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return value


def _env_int(name: str, default: int) -> int:
    return int(os.environ.get(name) or default)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="run a simulated sharded LLM fleet that exports spans to tpmledger",
        description="Start a finite-capacity OpenAI-compatible LLM server and SHARDS worker "
        "processes, each with CONCURRENCY calls in flight, retries with exponential backoff, "
        "and one OpenTelemetry span per HTTP try exported over OTLP. --sweep runs one run per "
        "cap under one tpmledger.sweep.id with the same request mix. Ctrl-C stops cleanly "
        "(tries in flight end as cancelled spans; every span is flushed).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--shards", type=int, default=_env_int("SHARD_COUNT", 8), help="shard processes")
    p.add_argument(
        "--concurrency", type=int, default=_env_int("LLM_CONCURRENCY", 16), help="cap per shard"
    )
    p.add_argument("--duration", type=parse_duration, default=300.0, help="e.g. 30s, 5m")
    p.add_argument(
        "--endpoint",
        default=None,
        help="OTLP endpoint of tpmledger ingest (default: $OTEL_EXPORTER_OTLP_ENDPOINT, else "
        "http://127.0.0.1:4318, or :4317 with --protocol grpc)",
    )
    p.add_argument(
        "--protocol",
        choices=["http/protobuf", "grpc"],
        default=os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL") or "http/protobuf",
    )
    p.add_argument("--run-id", default=None, help="default sim_<UTC time>_sharded")
    p.add_argument("--sweep", type=_caps, default=None, metavar="CAPS", help="e.g. 4,8,16,32,64")
    p.add_argument("--sweep-id", default=None, help="default: the run id")
    p.add_argument("--capacity-tpm", type=int, default=None, help="server token budget per minute")
    p.add_argument(
        "--quota-tpm",
        type=_positive_int,
        default=None,
        help="provider quota: tokens per UTC minute; over it the server answers 429 with "
        "x-ratelimit-* headers, which the workers record as span attributes "
        "(docs/simulator.md#provider-quota)",
    )
    p.add_argument(
        "--quota-rpm", type=_positive_int, default=None, help="provider quota: requests per minute"
    )
    p.add_argument("--speed", type=float, default=None, help="server service times ÷ SPEED")
    p.add_argument(
        "--kv-cache-tokens",
        type=_positive_int,
        default=None,
        help="server KV-cache pool in tokens: a running request holds prompt + reply; "
        "without room it waits (a small pool makes a serving-bound run)",
    )
    p.add_argument(
        "--server-port",
        type=int,
        default=None,
        help="the simulated server's port (default: one the kernel picks); its vLLM "
        "metrics are at http://127.0.0.1:PORT/metrics for `up --scrape`",
    )
    p.add_argument("--error-rate", type=float, default=None, help="share of 5xx answers")
    p.add_argument("--timeout-rate", type=float, default=None, help="share of stalled requests")
    p.add_argument("--stream-share", type=float, default=None, help="share of stream=true")
    p.add_argument(
        "--retry-backoff",
        type=float,
        default=float(os.environ.get("LLM_RETRY_BACKOFF_S") or 1.0),
        help="first backoff in seconds (doubles, capped at 30 s)",
    )
    p.add_argument("--max-attempts", type=int, default=6, help="tries per call, first included")
    p.add_argument(
        "--request-timeout", type=parse_duration, default=30.0, help="read timeout per try"
    )
    p.add_argument("--llm-url", default=None, help="call this OpenAI-compatible server instead")
    p.add_argument("--seed", type=int, default=0, help="request mix and server dice")
    p.add_argument(
        "--progress-every", type=parse_duration, default=5.0, help="seconds between lines"
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.add_argument(
        "--pitfall",
        action="append",
        choices=sorted(PITFALLS),
        default=[],
        help="produce a cap-selection pitfall (repeatable): "
        # argparse formats help with %: a literal one is written %%.
        + "; ".join(f"{n}: {what.replace('%', '%%')}" for n, (what, _) in sorted(PITFALLS.items()))
        + " (docs/simulator.md#pitfalls-on-demand)",
    )
    p.add_argument(
        "--demo",
        action="store_true",
        help="four runs side by side, each starting calls for 4.5 minutes: a sweep over caps "
        "4, 8 and 32 against a provider quota (cap-bound, improved, then quota-bound and "
        "moved_the_bottleneck) and a serving-bound run; every verdict within about six "
        "minutes (docs/simulator.md#the-demo)",
    )
    p.set_defaults(func=run_simulate)


# Each pitfall: what it does, and the fleet (and "server") settings that produce it.
PITFALLS: dict[str, tuple[str, Callable[[argparse.Namespace], dict[str, Any]]]] = {
    "retry-storm": (
        "35 % of answers are 5xx and every failure is retried at once, up to 10 tries "
        "(no retry budget)",
        lambda a: {"server": {"error_rate": 0.35}, "retry_backoff_s": 0.0, "max_attempts": 10},
    ),
    "deadline-overrun": (
        "every attempt declares a 2 s deadline (tpmledger.deadline_s) that most calls outlast",
        lambda a: {"deadline_s": 2.0},
    ),
    "tool-wait": (
        "after each answer the slot stays held 1 s in an execute_tool span",
        lambda a: {"tool_wait_s": 1.0},
    ),
    "shared-pool": (
        "attempts declare a target cap (tpmledger.target.concurrency.cap) of one shard's "
        "concurrency: the fleet shares a pool far smaller than it runs",
        lambda a: {"target_cap": a.concurrency},
    ),
}


def fleet_config(args: argparse.Namespace, run_id: str) -> FleetConfig:
    """The run the flags describe (server and workload defaults unless overridden)."""
    from tpmledger.simulator.config import ServerConfig, WorkloadConfig
    from tpmledger.simulator.fleet import FleetConfig

    server: dict[str, Any] = {"seed": args.seed}
    for flag, name in (
        ("capacity_tpm", "capacity_tpm"),
        ("quota_tpm", "quota_tpm"),
        ("quota_rpm", "quota_rpm"),
        ("speed", "speed"),
        ("error_rate", "error_rate"),
        ("timeout_rate", "timeout_rate"),
        ("kv_cache_tokens", "kv_cache_tokens"),
        ("server_port", "port"),
    ):
        if getattr(args, flag, None) is not None:
            server[name] = getattr(args, flag)
    workload: dict[str, Any] = {}
    if args.stream_share is not None:
        workload["stream_share"] = args.stream_share
    fleet: dict[str, Any] = {
        "retry_backoff_s": args.retry_backoff,
        "max_attempts": args.max_attempts,
    }
    for name in getattr(args, "pitfall", None) or []:
        changes = PITFALLS[name][1](args)
        server |= changes.pop("server", {})
        fleet |= changes
    return FleetConfig(
        run_id=run_id,
        sweep_id=args.sweep_id,
        shards=args.shards,
        concurrency=args.concurrency,
        duration_s=args.duration,
        otlp_endpoint=args.endpoint,
        otlp_protocol=args.protocol,
        request_timeout_s=args.request_timeout,
        seed=args.seed,
        workload=WorkloadConfig(**workload),
        server=ServerConfig(**server),
        llm_url=args.llm_url,
        **fleet,
    )


def _stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%d_%H%M%S")


def _plan(args: argparse.Namespace) -> list[tuple[FleetConfig, list[int] | None]]:
    """(config, sweep caps or None) for each phase the command runs (not the demo)."""
    run_id = args.run_id or f"sim_{_stamp()}_sharded"
    return [(fleet_config(args, run_id), args.sweep)]


def endpoint_reachable(endpoint: str, timeout_s: float = 3.0) -> bool:
    """True if something accepts TCP connections at the OTLP endpoint's host and port."""
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def run_simulate(args: argparse.Namespace) -> int:
    """Run the plan; progress on stderr, summary on stdout (text or ``--json``)."""
    from tpmledger.simulator.fleet import run_fleet
    from tpmledger.simulator.progress import progress_printer, summary_text, sweep_table
    from tpmledger.simulator.sweep import run_sweep

    if args.endpoint is None:
        port = 4317 if args.protocol == "grpc" else 4318
        args.endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or f"http://127.0.0.1:{port}"
    if not endpoint_reachable(args.endpoint):
        print(
            f"nothing listens at {args.endpoint}: start tpmledger first (`tpmledger up`) or "
            "pass --endpoint (OTLP/HTTP base URL, or the gRPC address with --protocol grpc)",
            file=sys.stderr,
        )
        return 2
    results: list[FleetResult] = []

    def report(result: FleetResult) -> None:
        results.append(result)
        if not args.json:
            print(summary_text(result.summary()), flush=True)

    every = args.progress_every
    if args.demo:  # its runs side by side (simulator.demo)
        from tpmledger.simulator.demo import demo_configs
        from tpmledger.simulator.fleet import run_fleets

        configs = demo_configs(fleet_config(args, "demo"), _stamp())
        names = ", ".join(c.run_id for c in configs)
        print(f"demo: {len(configs)} runs side by side ({names})", file=sys.stderr)
        for result in run_fleets(configs, lambda c: progress_printer(c.run_id), every):
            report(result)
        plans: list[tuple[FleetConfig, list[int] | None]] = []
    else:
        plans = _plan(args)
    for config, caps in plans:
        if caps:
            print(f"cap sweep {config.sweep_id or config.run_id}: caps {caps}", file=sys.stderr)
            done = run_sweep(
                config,
                caps,
                progress_for=lambda c: progress_printer(f"cap {c.concurrency}"),
                progress_every_s=every,
                on_result=report,
            )
            if not args.json and len(done) > 1:
                print(sweep_table([r.summary() for r in done]), flush=True)
        else:
            report(run_fleet(config, progress_printer("run"), every))
        if results and results[-1].interrupted:
            break
    if not args.json and args.demo:
        print(sweep_table([r.summary() for r in results if r.config.sweep_id]), flush=True)
    if args.json:
        sweep_id = next((r.config.sweep_id for r in results if r.config.sweep_id), None)
        print(json.dumps({"sweep_id": sweep_id, "runs": [r.summary() for r in results]}))
    if any(r.interrupted for r in results):
        return 130
    incomplete = any(len(r.complete) < r.config.shards for r in results)
    return 1 if incomplete else 0
