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
from collections.abc import Collection, MutableSequence, Sequence
from dataclasses import dataclass, field
from itertools import compress, islice, pairwise, repeat
from operator import add, and_, eq, mul, ne, not_
from typing import Any

from tpmledger.provenance.reference.event_lines import FIELD, NULL, Row, text_value

MINUTE_NS = 60 * 10**9
MAX_MINUTES = 10_000_000  # the sealer's limit too (provenance.event_file.MAX_DIGEST_MINUTES)
_NO_START = -(2**63)  # an absent start_ns sorts first, as in the sealer's ordering
PERCENTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}


@dataclass
class _Minute:
    calls: int = 0
    prompt: int = 0
    completion: int = 0
    successes: int = 0
    retries: int = 0
    shards: set[bytes] = field(default_factory=set)
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


_OK = b'"ok"'


class RunTally:
    """Feed every piece of rows with :meth:`add_rows` (file order), then read
    :meth:`figures` and :meth:`leaves`.

    Rows hold each field's RFC 8785 text. Text values are compared as written (a value has
    one canonical text) and decoded only to be shown or ordered. A piece is counted column
    by column, and a minute's sums over each run of consecutive lines in that minute (in a
    canonical file, one or two runs a piece); a file out of order is counted all the same.
    """

    def __init__(self) -> None:
        self.attempts = 0
        self.successes = 0
        self.run_ids: set[bytes] = set()
        self.minutes: dict[int, _Minute] = {}
        self.shard_tokens: dict[bytes, int] = {}
        self.ttft = array("d")
        self.explicit = False
        self.resend_known = 0
        self.known_retries = 0
        self.failed_types: Counter[bytes] = Counter()
        # Per call, the line it was first seen on; for calls seen more than once, also its
        # [first, last] attempt by (start_ns, end_ns, span_id), ties by line order: the
        # file orders them by trace_id.
        self.calls: dict[bytes, int] = {}
        self.attempt_order: dict[bytes, list[int]] = {}
        # Per line, what ordering a call's attempts needs; the error of each failed line.
        self.starts: MutableSequence[int] = array("q")
        self.ends: MutableSequence[int] = array("q")
        self.spans: list[bytes] = []
        self.ok = bytearray()
        self.errors: dict[int, bytes] = {}
        self.unknown_resend: list[tuple[int, int]] = []  # (line, minute) without resend_count

    def add_rows(self, rows: Sequence[Row]) -> None:
        """Count each event of a piece and hash its line into its minute."""
        if not rows:
            return
        columns = list(zip(*rows, strict=True))
        lines = columns[0]
        col = {key: columns[i] for key, i in FIELD.items()}
        shards, statuses, calls, spans = (
            col["shard_id"],
            col["status"],
            col["call_id"],
            col["span_id"],
        )
        if NULL in col["end_ns"] or NULL in shards:
            raise ValueError("every event needs a shard_id and an end_ns")
        first, n = self.attempts, len(rows)
        numbers = range(first, first + n)
        ends = _nanoseconds(col["end_ns"])
        minute_of = [end // MINUTE_NS for end in ends]
        prompt = _counts(col["prompt_tokens"])
        completion = _counts(col["completion_tokens"])
        ok = list(map(eq, statuses, repeat(_OK)))
        failed = list(map(not_, ok))
        resend = col["resend_count"]
        retried = _retried(resend)
        # Runs of consecutive lines in one minute: [a, b) each.
        cuts = [0, *compress(range(1, n), map(ne, minute_of, islice(minute_of, 1, None))), n]
        for a, b in pairwise(cuts):
            minute = self.minutes.get(minute_of[a])
            if minute is None:
                minute = self.minutes[minute_of[a]] = _Minute()
            minute.calls += b - a
            minute.prompt += sum(prompt[a:b])
            minute.completion += sum(completion[a:b])
            minute.successes += sum(ok[a:b])
            minute.retries += sum(retried[a:b])
            minute.shards.update(shards[a:b])
            minute.digest.update(b"".join(lines[a:b]))
        tokens = self.shard_tokens
        for shard, total in zip(shards, map(add, prompt, completion), strict=True):
            tokens[shard] = tokens.get(shard, 0) + total
        self.attempts += n
        self.successes += sum(ok)
        self.run_ids.update(col["run_id"])
        ttft = col["ttft_s"]
        self.ttft.extend(map(float, compress(ttft, map(and_, ok, map(ne, ttft, repeat(NULL))))))
        self.failed_types.update(compress(col["error_type"], failed))
        self.errors.update(compress(zip(numbers, col["error_type"], strict=True), failed))
        unknown = list(map(eq, resend, repeat(NULL)))
        self.unknown_resend.extend(compress(zip(numbers, minute_of, strict=True), unknown))
        self.resend_known += n - sum(unknown)
        self.known_retries += sum(retried)
        if not self.explicit:
            self.explicit = any(
                c != s and c != NULL and s != NULL for c, s in zip(calls, spans, strict=True)
            )
        self.starts = _extended(self.starts, _nanoseconds(col["start_ns"]))
        self.ends = _extended(self.ends, ends)
        self.spans += spans
        self.ok += bytes(ok)
        self._add_calls(calls, numbers)

    def _add_calls(self, calls: Sequence[bytes], numbers: range) -> None:
        """Record each line's call; a call seen before, or twice here, goes line by line."""
        line_of = dict(zip(calls, numbers, strict=True))
        repeated = self.calls.keys() & line_of.keys()
        if len(line_of) < len(calls):
            repeated |= {call for call, n in Counter(calls).items() if n > 1}
        for call in repeated:
            del line_of[call]
        self.calls.update(line_of)
        if repeated:
            for call, line in compress(
                zip(calls, numbers, strict=True), map(repeated.__contains__, calls)
            ):
                if call in self.calls:
                    self._add_to_call(call, line)
                else:
                    self.calls[call] = line

    def _order(self, line: int) -> tuple[int, int, tuple[int, str]]:
        span = text_value(self.spans[line])
        return self.starts[line], self.ends[line], (0, "") if span is None else (1, span)

    def _add_to_call(self, call: bytes, line: int) -> None:
        seen = self.calls[call]
        first, last = self.attempt_order.get(call, (seen, seen))
        order = self._order(line)
        if order < self._order(first):  # ties: the earlier line stays first
            first = line
        if order >= self._order(last):  # ties: the later line is last
            last = line
        self.attempt_order[call] = [first, last]

    def _attempt_lines(self, which: int) -> Collection[int]:
        """Every call's first (0) or last (1) attempt's line."""
        lines = self.calls.copy()
        lines.update((call, pair[which]) for call, pair in self.attempt_order.items())
        return lines.values()

    @property
    def retries_measured(self) -> bool:
        return self.attempts > 0 and (self.resend_known > 0 or self.explicit)

    def _positional_retries(self) -> Counter[int]:
        """Per minute, the attempts without resend_count that are not their call's first."""
        found: Counter[int] = Counter()
        if not self.unknown_resend:
            return found
        first_lines = set(self._attempt_lines(0))
        for line, minute in self.unknown_resend:
            if line not in first_lines:
                found[minute] += 1
        return found

    def _calls(self) -> tuple[int, int, dict[str, int] | None]:
        """(logical calls, calls whose last attempt succeeded, retry causes or None)."""
        if not self.explicit:
            return self.attempts, self.successes, None
        causes: Counter[str] = Counter()
        for error, n in self.failed_types.items():
            causes[_cause(error)] += n
        last_lines = self._attempt_lines(1)
        succeeded = sum(map(self.ok.__getitem__, last_lines))
        failed_last = Counter(map(self.errors.__getitem__, self.errors.keys() & last_lines))
        for error, n in failed_last.items():
            causes[_cause(error)] -= n  # a call's last attempt is no cause
        return len(self.calls), succeeded, {k: n for k, n in sorted(causes.items()) if n}

    def _minute_rows(self) -> list[tuple[int, _Minute]]:
        if not self.minutes:
            return []
        first, last = min(self.minutes), max(self.minutes)
        if last - first > MAX_MINUTES:  # a file no seal writes; its leaves would not fit
            raise ValueError(f"events span more than {MAX_MINUTES:,} minutes")
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
        run_ids = [run_id for run_id in map(text_value, self.run_ids) if run_id is not None]
        first_ns, last_ns = (min(self.ends), max(self.ends)) if self.ends else (None, None)
        return {
            "run_id": min(run_ids, default=None),
            "attempts": self.attempts,
            "logical_calls": calls,
            "shard_count": len(self.shard_tokens),
            "first_event_utc": None if first_ns is None else ns_utc(first_ns),
            "last_event_utc": None if last_ns is None else ns_utc(last_ns),
            "active_minutes": sum(1 for _, row in rows if row.calls),
            "peak_minute": _peak(rows, lambda row: row.prompt + row.completion),
            "peak_completion_minute": _peak(rows, lambda row: row.completion),
            "sustained_tpm_total": float(statistics.median(inner)) if inner else None,
            "attempt_success_rate": _ratio(self.successes, self.attempts),
            "call_success_rate": _ratio(ok_calls, calls),
            "retry_rate": _ratio(retries, self.attempts) if self.retries_measured else None,
            "retry_causes": causes,
            "ttft_s": _distribution(self.ttft),
            "shard_balance": _balance(
                {str(text_value(shard)): n for shard, n in self.shard_tokens.items()}
            ),
        }


def _nanoseconds(texts: Sequence[bytes]) -> list[int]:
    """``"1769917440000000000"`` texts as ints (absent: before any time)."""
    if NULL in texts:
        return [_NO_START if text == NULL else int(text[1:-1]) for text in texts]
    return [int(text[1:-1]) for text in texts]


def _extended(values: MutableSequence[int], more: list[int]) -> MutableSequence[int]:
    """``values`` (an array of 64-bit ints, until a value needs more) followed by ``more``."""
    if isinstance(values, array):
        try:
            values.extend(array("q", more))
            return values
        except OverflowError:
            values = values.tolist()
    values.extend(more)
    return values


def _counts(texts: Sequence[bytes]) -> list[int]:
    """Token count texts as ints (absent: 0)."""
    return [0 if text == NULL else int(text) for text in texts]


def _retried(texts: Sequence[bytes]) -> list[bool]:
    """Whether each resend_count text says the attempt is a retry (> 0)."""
    value = {text: text != NULL and int(text) > 0 for text in set(texts)}
    return list(map(value.__getitem__, texts))


def _cause(error: bytes) -> str:
    """The retry cause an error type counts as (none given: "error")."""
    return text_value(error) or "error"


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


def _distribution(values: Sequence[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "p99": None, "mean": None, "variance": None}
    ordered = sorted(values)
    mean = math.fsum(ordered) / len(ordered)
    deviations = [x - mean for x in ordered]
    variance = math.fsum(map(mul, deviations, deviations)) / len(ordered)
    figures: dict[str, float | None] = {p: percentile(ordered, q) for p, q in PERCENTILES.items()}
    return figures | {"mean": mean, "variance": variance}


def _balance(tokens: dict[str, int]) -> dict[str, Any]:
    total = sum(tokens.values())
    if total == 0:
        return {"shares": None, "imbalance": None}
    shares = {shard: n / total for shard, n in sorted(tokens.items())}
    mean = 1 / len(shares)
    return {"shares": shares, "imbalance": max(shares.values()) / mean}
