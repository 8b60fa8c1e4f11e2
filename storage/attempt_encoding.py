"""Attempt rows → PostgreSQL ``COPY`` text, encoded once, where the rows are made.

psycopg's generic ``Copy.write_row`` looks up a dumper for every value of every row
(arrays through Python-level list dumpers), which cost ingest about as much CPU as
normalizing the span. The attempts table has a fixed schema, so :func:`encode_attempts`
formats each row with one f-string in COPY's text format and hands the writer a single
``bytes`` block per request. The same pass tallies what the ``runs`` upsert needs, so
the writer never walks the rows again, and a queued request costs one buffer instead of
thousands of small Python objects.

COPY text format (PostgreSQL docs, "COPY — Text Format"): columns separated by a tab,
rows by a newline, ``\\N`` is NULL, and a backslash, tab, newline or carriage return
inside a value is written as ``\\\\``, ``\\t``, ``\\n``, ``\\r``. ``bytea`` is written in
hex input form (``\\x…``, its backslash doubled); ``text[]`` as an array literal with
every element quoted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from storage.attempt_columns import ATTEMPT_COPY_COLUMNS

# The encoder below unpacks rows positionally: it must change with the column order.
_EXPECTED_COLUMNS: Final = (
    "trace_id", "span_id", "parent_span_id", "run_id", "shard_id", "declared_shard_count",
    "concurrency_cap", "sweep_id", "call_id", "call_id_explicit", "resend_count", "start_ns",
    "end_ns", "queue_wait_s", "ttft_s", "prompt_tokens", "completion_tokens",
    "reported_total_tokens", "cache_read_tokens", "cache_write_tokens", "reasoning_tokens",
    "model", "provider", "operation_name", "finish_reasons", "status", "error_type",
    "http_status", "convention", "span_name", "span_kind", "span_attributes",
    "resource_attributes",
)  # fmt: skip
if ATTEMPT_COPY_COLUMNS != _EXPECTED_COLUMNS:
    raise ImportError("storage.attempt_encoding is out of date with ATTEMPT_COPY_COLUMNS")

_NULL: Final = "\\N"
_BYTEA_PREFIX: Final = "\\\\x"  # bytea hex input, its backslash escaped for COPY
_ESCAPES: Final = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_ARRAY_ELEMENT_ESCAPES: Final = str.maketrans({"\\": "\\\\", '"': '\\"'})


@dataclass(slots=True)
class RunTally:
    """What a block adds to one run: the ``runs`` row facts of its attempts."""

    first_ns: int
    last_ns: int
    shard_ids: set[str]
    declared_shard_count: int | None
    concurrency_cap: int | None
    sweep_id: str | None
    attempts: int

    def merge(self, other: RunTally) -> None:
        """Fold ``other`` into this tally (the larger declared count, cap and sweep win)."""
        self.first_ns = min(self.first_ns, other.first_ns)
        self.last_ns = max(self.last_ns, other.last_ns)
        self.shard_ids |= other.shard_ids
        self.declared_shard_count = _larger(self.declared_shard_count, other.declared_shard_count)
        self.concurrency_cap = _larger(self.concurrency_cap, other.concurrency_cap)
        self.sweep_id = _larger(self.sweep_id, other.sweep_id)
        self.attempts += other.attempts


@dataclass(slots=True)
class AttemptBlock:
    """Attempt rows as one COPY text buffer, with their per-run tallies."""

    text: bytes
    rows: int
    runs: dict[str, RunTally] = field(default_factory=dict)


def _larger(current: Any, value: Any) -> Any:
    if value is None:
        return current
    return value if current is None or value > current else current


def _text(value: str) -> str:
    # Four single-character scans beat one regex character class ~10x on long JSON.
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.translate(_ESCAPES)
    return value


def _optional(value: int | float | None) -> str:
    return _NULL if value is None else str(value)


def _array(values: list[str] | None) -> str:
    if values is None:
        return _NULL
    quoted = ",".join(f'"{item.translate(_ARRAY_ELEMENT_ESCAPES)}"' for item in values)
    return _text(f"{{{quoted}}}")


def encode_attempts(rows: Iterable[Sequence[Any]]) -> AttemptBlock:
    """Encode rows in ``ATTEMPT_COPY_COLUMNS`` order as COPY text and tally their runs."""
    lines: list[str] = []
    runs: dict[str, RunTally] = {}
    memo: dict[str, str] = {}  # short repeated strings (run, shard, model, …) escape once
    arrays: dict[tuple[str, ...], str] = {}

    def short(value: str | None) -> str:
        if value is None:
            return _NULL
        escaped = memo.get(value)
        if escaped is None:
            escaped = memo[value] = _text(value)
        return escaped

    for row in rows:
        (trace_id, span_id, parent, run_id, shard_id, declared, cap, sweep, call_id,
         explicit, resend, start_ns, end_ns, queue_wait, ttft, prompt, completion,
         reported, cache_read, cache_write, reasoning, model, provider, operation,
         finish, status, error_type, http_status, convention, span_name, span_kind,
         span_json, resource_json) = row  # fmt: skip
        if finish is None:
            finish_text = _NULL
        else:
            key = tuple(finish)
            finish_text = arrays.get(key) or arrays.setdefault(key, _array(finish))
        lines.append(
            f"\\\\x{trace_id.hex()}\t\\\\x{span_id.hex()}\t"
            f"{_NULL if parent is None else _BYTEA_PREFIX + parent.hex()}\t"
            f"{short(run_id)}\t{short(shard_id)}\t{_optional(declared)}\t{_optional(cap)}\t"
            f"{short(sweep)}\t{_text(call_id)}\t{'t' if explicit else 'f'}\t"
            f"{_optional(resend)}\t{start_ns}\t{end_ns}\t{_optional(queue_wait)}\t"
            f"{_optional(ttft)}\t{_optional(prompt)}\t{_optional(completion)}\t"
            f"{_optional(reported)}\t{_optional(cache_read)}\t{_optional(cache_write)}\t"
            f"{_optional(reasoning)}\t{short(model)}\t{short(provider)}\t{short(operation)}\t"
            f"{finish_text}\t{status}\t{short(error_type)}\t{_optional(http_status)}\t"
            f"{short(convention)}\t{short(span_name)}\t{span_kind}\t"
            f"{_text(span_json)}\t{short(resource_json)}\n"
        )
        tally = runs.get(run_id)
        if tally is None:
            runs[run_id] = RunTally(end_ns, end_ns, {shard_id}, declared, cap, sweep, 1)
            continue
        if end_ns < tally.first_ns:
            tally.first_ns = end_ns
        elif end_ns > tally.last_ns:
            tally.last_ns = end_ns
        tally.shard_ids.add(shard_id)
        if declared is not None:
            tally.declared_shard_count = _larger(tally.declared_shard_count, declared)
        if cap is not None:
            tally.concurrency_cap = _larger(tally.concurrency_cap, cap)
        if sweep is not None:
            tally.sweep_id = _larger(tally.sweep_id, sweep)
        tally.attempts += 1
    return AttemptBlock("".join(lines).encode(), len(lines), runs)


def merge_runs(blocks: Iterable[AttemptBlock]) -> dict[str, RunTally]:
    """The run tallies of several blocks folded into one per run (the blocks are unchanged)."""
    merged: dict[str, RunTally] = {}
    for block in blocks:
        for run_id, tally in block.runs.items():
            current = merged.get(run_id)
            if current is None:
                merged[run_id] = RunTally(
                    tally.first_ns,
                    tally.last_ns,
                    set(tally.shard_ids),
                    tally.declared_shard_count,
                    tally.concurrency_cap,
                    tally.sweep_id,
                    tally.attempts,
                )
            else:
                current.merge(tally)
    return merged
