"""Human output of ``tpmledger simulate``: a progress line every few seconds, a summary at the end.

Progress goes to stderr so ``--json`` output on stdout stays machine-readable.
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from tpmledger.simulator.counters import ShardCounters


def compact(n: float | None) -> str:
    """12345 → 12.3k, 1234567 → 1.23M; None → "not measured"."""
    if n is None:
        return "not measured"
    for limit, suffix, digits in ((1e6, "M", 2), (1e3, "k", 1)):
        if abs(n) >= limit:
            return f"{n / limit:.{digits}f}{suffix}"
    return f"{n:.0f}"


def _percent(x: float | None) -> str:
    return "not measured" if x is None else f"{100 * x:.1f}%"


def progress_line(label: str, elapsed_s: float, total: ShardCounters) -> str:
    """One line: elapsed, calls, tokens by type, errors and 429s, retries, spans exported."""
    return (
        f"[{label} {elapsed_s:5.0f}s] calls {total.calls_ok} ok / {total.calls_started} | "
        f"tokens prompt {compact(total.prompt_tokens)} completion "
        f"{compact(total.completion_tokens)} | errors {total.attempts_failed} "
        f"(429: {total.rate_limited}) | retries {total.retries} | "
        f"spans exported {total.spans_exported}/{total.spans_ended}"
    )


def progress_printer(label: str, stream: TextIO = sys.stderr) -> Any:
    """A fleet progress callback that prints ``progress_line`` to ``stream``."""

    def show(elapsed_s: float, total: ShardCounters) -> None:
        print(progress_line(label, elapsed_s, total), file=stream, flush=True)

    return show


def summary_text(summary: dict[str, Any]) -> str:
    """The end-of-run block for people (``--json`` prints ``summary`` itself)."""
    c = summary["counters"]
    errors = ", ".join(f"{k}: {v}" for k, v in sorted(c["errors_by_type"].items())) or "none"
    lines = [
        f"run {summary['run_id']}"
        + (f" (sweep {summary['sweep_id']})" if summary["sweep_id"] else "")
        + f": {summary['shards']} shards x cap {summary['concurrency']}, "
        f"{c['elapsed_s']:.0f} s" + (" — interrupted" if summary["interrupted"] else ""),
        f"  calls: {c['calls_started']} started, {c['calls_ok']} ok, {c['calls_failed']} failed, "
        f"{c['calls_unfinished']} unfinished at stop",
        f"  attempts: {c['attempts']} ({c['retries']} retries); errors: {errors}",
        f"  tokens: prompt {c['prompt_tokens']}, completion {c['completion_tokens']}, "
        f"total {c['prompt_tokens'] + c['completion_tokens']}",
        f"  throughput: {compact(summary['tokens_per_minute_total'])} tokens/min total, "
        f"{compact(summary['tokens_per_minute_completion'])} completion; "
        f"{compact(summary['spans_per_s'])} spans/s",
        f"  rates: attempt success {_percent(summary['attempt_success_rate'])}, "
        f"call success {_percent(summary['call_success_rate'])}, "
        f"429 {_percent(summary['rate_limited_share'])}, "
        f"retries {_percent(summary['retry_share'])}",
        f"  spans: {c['spans_ended']} ended, {c['spans_exported']} exported, "
        f"{c['spans_export_failed']} failed to export "
        f"({summary['shards_reported']}/{summary['shards']} shards reported)",
    ]
    return "\n".join(lines)


def sweep_table(summaries: list[dict[str, Any]]) -> str:
    """One row per cap: throughput against 429 share, retry share and call success."""
    rows = [f"{'cap':>5} {'tokens/min':>12} {'429 share':>10} {'retry share':>12} {'call ok':>8}"]
    for s in summaries:
        rows.append(
            f"{s['concurrency']:>5} {compact(s['tokens_per_minute_total']):>12} "
            f"{_percent(s['rate_limited_share']):>10} {_percent(s['retry_share']):>12} "
            f"{_percent(s['call_success_rate']):>8}"
        )
    return "\n".join(rows)
