"""One pass over a run's events: the predicate figures and the minute leaves (stdlib only).

The definitions are those of docs/metrics.md#per-run, written out directly:

- a minute is the UTC minute of an attempt's end; minutes run from the first to the
  last, empty ones included; an attempt succeeded when ``status`` is ``ok``;
- retries are *measured* when some event has a ``resend_count`` or an explicit
  ``call_id`` (one that differs from its ``span_id``); an attempt is a retry when its
  resend count is > 0, or, without one, when it is not its call's first attempt by
  (``start_ns``, ``end_ns``, ``span_id``);
- a logical call is a distinct ``call_id`` (every attempt, with implicit ids); it
  succeeded when its last attempt by (``start_ns``, ``end_ns``, ``span_id``) did; the
  retry causes are the error types of its failed attempts before the last;
- percentiles interpolate linearly between the order statistics; the variance is the
  population variance.
"""

from __future__ import annotations

import hashlib
import math
import statistics
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

MINUTE_NS = 60 * 10**9
_NO_START = -(2**63)  # an absent start_ns sorts first, as in the sealer's ordering
PERCENTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}


@dataclass
class _Minute:
    calls: int = 0
    prompt: int = 0
    completion: int = 0
    successes: int = 0
    retries: int = 0
    shards: set[str] = field(default_factory=set)
    digest: Any = field(default_factory=hashlib.sha256)


def minute_utc(minute: int) -> str:
    """The start of minute number ``minute`` (since the epoch) as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(minute * 60))


def ns_utc(ns: int) -> str:
    """Nanoseconds since the epoch as RFC 3339 UTC, milliseconds truncated, ``Z``."""
    seconds, rest = divmod(ns, 10**9)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{rest // 10**6:03d}Z"


def percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between the order statistics around ``(n - 1) * q``."""
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    lower = ordered[low]
    if position == low or low + 1 == len(ordered):
        return lower
    upper = ordered[low + 1]
    return lower if upper == lower else (position - low) * (upper - lower) + lower


class RunTally:
    """Feed every event with :meth:`add` (file order), then read :meth:`figures` and
    :meth:`leaves`."""

    def __init__(self) -> None:
        self.attempts = 0
        self.successes = 0
        self.run_id: str | None = None
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self.minutes: dict[int, _Minute] = {}
        self.shard_tokens: dict[str, int] = {}
        self.ttft: list[float] = []
        self.explicit = False
        self.resend_known = 0
        self.known_retries = 0
        self.failed_types: Counter[str] = Counter()
        # Per call: the line of its only attempt, or [first line, last line].
        self.calls: dict[str | None, int | list[int]] = {}
        # Per line, what ordering a call's attempts needs.
        self.starts = array("q")
        self.ends = array("q")
        self.spans: list[str | None] = []
        self.ok = bytearray()
        self.errors: list[str | None] = []
        self.unknown_resend: list[tuple[int, int]] = []  # (line, minute) without resend_count

    def add(self, line: bytes, event: dict[str, Any]) -> None:
        """Count one event (``end_ns``/``start_ns`` as ints) and hash its line."""
        end, shard = event["end_ns"], event["shard_id"]
        if end is None or shard is None:
            raise ValueError("every event needs a shard_id and an end_ns")
        index = self.attempts
        self.attempts += 1
        ok = event["status"] == "ok"
        prompt = event["prompt_tokens"] or 0
        completion = event["completion_tokens"] or 0
        run_id = event["run_id"]
        if run_id is not None and (self.run_id is None or run_id < self.run_id):
            self.run_id = run_id
        self.first_ns = end if self.first_ns is None else min(self.first_ns, end)
        self.last_ns = end if self.last_ns is None else max(self.last_ns, end)
        minute_number = end // MINUTE_NS
        minute = self.minutes.get(minute_number)
        if minute is None:
            minute = self.minutes[minute_number] = _Minute()
        minute.calls += 1
        minute.prompt += prompt
        minute.completion += completion
        minute.shards.add(shard)
        minute.digest.update(line)
        self.shard_tokens[shard] = self.shard_tokens.get(shard, 0) + prompt + completion
        if ok:
            self.successes += 1
            minute.successes += 1
            if event["ttft_s"] is not None:
                self.ttft.append(float(event["ttft_s"]))
        else:
            self.failed_types[event["error_type"] or "error"] += 1
        resend = event["resend_count"]
        if resend is None:
            self.unknown_resend.append((index, minute_number))
        else:
            self.resend_known += 1
            if resend > 0:
                self.known_retries += 1
                minute.retries += 1
        call, span = event["call_id"], event["span_id"]
        self.explicit = self.explicit or (call is not None and span is not None and call != span)
        start = event["start_ns"]
        self.starts.append(_NO_START if start is None else start)
        self.ends.append(end)
        self.spans.append(span)
        self.ok.append(ok)
        self.errors.append(event["error_type"])
        self._add_to_call(call, index)

    def _order(self, line: int) -> tuple[int, int, tuple[int, str]]:
        span = self.spans[line]
        return self.starts[line], self.ends[line], (0, "") if span is None else (1, span)

    def _add_to_call(self, call: str | None, line: int) -> None:
        seen = self.calls.get(call)
        if seen is None:
            self.calls[call] = line
            return
        first, last = (seen, seen) if isinstance(seen, int) else seen
        order = self._order(line)
        if order < self._order(first):  # ties: the earlier line stays first
            first = line
        if order >= self._order(last):  # ties: the later line is last
            last = line
        self.calls[call] = [first, last]

    @property
    def retries_measured(self) -> bool:
        return self.attempts > 0 and (self.resend_known > 0 or self.explicit)

    def _positional_retries(self) -> Counter[int]:
        """Per minute, the attempts without resend_count that are not their call's first."""
        found: Counter[int] = Counter()
        if not self.unknown_resend:
            return found
        first_lines = {v if isinstance(v, int) else v[0] for v in self.calls.values()}
        for line, minute in self.unknown_resend:
            if line not in first_lines:
                found[minute] += 1
        return found

    def _calls(self) -> tuple[int, int, dict[str, int] | None]:
        """(logical calls, calls whose last attempt succeeded, retry causes or None)."""
        if not self.explicit:
            return self.attempts, self.successes, None
        causes = Counter(self.failed_types)
        succeeded = 0
        for state in self.calls.values():
            last = state if isinstance(state, int) else state[1]
            if self.ok[last]:
                succeeded += 1
            else:
                causes[self.errors[last] or "error"] -= 1  # a call's last attempt is no cause
        return len(self.calls), succeeded, {k: n for k, n in sorted(causes.items()) if n}

    def _minute_rows(self) -> list[tuple[int, _Minute]]:
        if not self.minutes:
            return []
        first, last = min(self.minutes), max(self.minutes)
        return [(m, self.minutes.get(m) or _Minute()) for m in range(first, last + 1)]

    def leaves(self) -> list[dict[str, Any]]:
        """The minute leaves, first minute to last (empty minutes included)."""
        measured = self.retries_measured
        positional = self._positional_retries() if measured else Counter()
        return [
            {
                "minute_utc": minute_utc(m),
                "calls_in_minute": row.calls,
                "prompt_tpm_in": row.prompt,
                "completion_tpm_out": row.completion,
                "tpm_total": row.prompt + row.completion,
                "failures": row.calls - row.successes,
                "retries": row.retries + positional[m] if measured else None,
                "events_sha256": row.digest.hexdigest(),
            }
            for m, row in self._minute_rows()
        ]

    def figures(self) -> dict[str, Any]:
        """The run-level figures a summary's predicate carries (docs/metrics.md names)."""
        rows = self._minute_rows()
        calls, ok_calls, causes = self._calls()
        retries = self.known_retries + sum(self._positional_retries().values())
        inner = [row.prompt + row.completion for _, row in rows[1:-1]]
        return {
            "run_id": self.run_id,
            "attempts": self.attempts,
            "logical_calls": calls,
            "shard_count": len(self.shard_tokens),
            "first_event_utc": None if self.first_ns is None else ns_utc(self.first_ns),
            "last_event_utc": None if self.last_ns is None else ns_utc(self.last_ns),
            "active_minutes": sum(1 for _, row in rows if row.calls),
            "peak_minute": _peak(rows, lambda row: row.prompt + row.completion),
            "peak_completion_minute": _peak(rows, lambda row: row.completion),
            "sustained_tpm_total": float(statistics.median(inner)) if inner else None,
            "attempt_success_rate": _ratio(self.successes, self.attempts),
            "call_success_rate": _ratio(ok_calls, calls),
            "retry_rate": _ratio(retries, self.attempts) if self.retries_measured else None,
            "retry_causes": causes,
            "ttft_s": _distribution(self.ttft),
            "shard_balance": _balance(self.shard_tokens),
        }


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _peak(rows: list[tuple[int, _Minute]], by: Any) -> dict[str, Any] | None:
    best: tuple[int, _Minute] | None = None
    for m, row in rows:  # minute order: a tie keeps the earliest
        if row.calls and (best is None or by(row) > by(best[1])):
            best = (m, row)
    if best is None:
        return None
    m, row = best
    return {
        "minute_utc": minute_utc(m),
        "shard_count": len(row.shards),
        "calls_in_minute": row.calls,
        "completion_tpm_out": row.completion,
        "prompt_tpm_in": row.prompt,
        "tpm_total": row.prompt + row.completion,
    }


def _distribution(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "p99": None, "mean": None, "variance": None}
    ordered = sorted(values)
    mean = math.fsum(ordered) / len(ordered)
    variance = math.fsum((x - mean) ** 2 for x in ordered) / len(ordered)
    figures: dict[str, float | None] = {p: percentile(ordered, q) for p, q in PERCENTILES.items()}
    return figures | {"mean": mean, "variance": variance}


def _balance(tokens: dict[str, int]) -> dict[str, Any]:
    total = sum(tokens.values())
    if total == 0:
        return {"shares": None, "imbalance": None}
    shares = {shard: n / total for shard, n in sorted(tokens.items())}
    mean = 1 / len(shares)
    return {"shares": shares, "imbalance": max(shares.values()) / mean}
