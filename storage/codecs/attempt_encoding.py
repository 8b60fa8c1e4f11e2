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

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from math import isfinite
from typing import Any, Final

import orjson

from tpmledger.durations import MINUTE_NS
from tpmledger.storage.schema.attempt_columns import (
    ATTEMPT_COPY_COLUMNS,
    ATTEMPT_ROW_PARTS,
    NUMBER_COLUMNS,
)

# The encoder below unpacks rows positionally in ATTEMPT_COPY_COLUMNS order; if that order
# changes, tests/storage/test_attempt_encoding.py (which compares with psycopg's own row
# writer) fails.
_NUMERIC: Final = NUMBER_COLUMNS
#: The column order of the encoded text: the numbers first (printed together, see
#: :func:`encode_attempts`), then the rest, each part in ATTEMPT_COPY_COLUMNS order.
ENCODED_COLUMNS: Final = tuple(c for c in ATTEMPT_COPY_COLUMNS if c in _NUMERIC) + tuple(
    c for c in ATTEMPT_COPY_COLUMNS if c not in _NUMERIC
)

#: Where ``run_id`` sits in a line of the encoded text.
_RUN_FIELD: Final = ENCODED_COLUMNS.index("run_id")

_NULL: Final = "\\N"

_MAX_WAIT_S: Final = 3e9  # queue waits beyond ~95 years count as this (no int64 overflow)
#: Where ``retry_after_s`` sits in a row's quota part (the row's last columns).
_RETRY_AFTER: Final = [c.name for c in ATTEMPT_ROW_PARTS["quota"]].index("retry_after_s")
_BYTEA_PREFIX: Final = "\\\\x"  # bytea hex input, its backslash escaped for COPY
_ESCAPES: Final = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_UNESCAPE: Final = re.compile(r"\\(.)")
_UNESCAPED: Final = {"\\": "\\", "t": "\t", "n": "\n", "r": "\r"}
_ARRAY_ELEMENT_ESCAPES: Final = str.maketrans({"\\": "\\\\", '"': '\\"'})


class UnstorableValue(ValueError):
    """A row holds a value no column can take (a non-finite duration): the request's
    fault, answered 400 (ingest/export_handler.py)."""


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
    # Live minute table (docs/metrics.md#live-figures): end-time minute (ns) -> earliest
    # minute (ns) in which an attempt ending there was queued or admitted, and the
    # longest queued-to-released interval.
    touched: dict[int, int] = field(default_factory=dict)
    max_slot_ns: int = 0
    # The latest end + Retry-After of its attempts (0: none said to wait): until then a
    # client of the run was told to wait (``runs.wait_until_ns``).
    wait_until_ns: int = 0

    def merge(self, other: RunTally) -> None:
        """Fold ``other`` into this tally (the larger declared count, cap and sweep win)."""
        self.first_ns = min(self.first_ns, other.first_ns)
        self.last_ns = max(self.last_ns, other.last_ns)
        self.shard_ids |= other.shard_ids
        self.declared_shard_count = _larger(self.declared_shard_count, other.declared_shard_count)
        self.concurrency_cap = _larger(self.concurrency_cap, other.concurrency_cap)
        self.sweep_id = _larger(self.sweep_id, other.sweep_id)
        self.attempts += other.attempts
        self.max_slot_ns = max(self.max_slot_ns, other.max_slot_ns)
        self.wait_until_ns = max(self.wait_until_ns, other.wait_until_ns)
        touched = self.touched
        for end_minute, from_minute in other.touched.items():
            current = touched.get(end_minute)
            if current is None or from_minute < current:
                touched[end_minute] = from_minute


@dataclass(slots=True)
class AttemptBlock:
    """Attempt rows as one COPY text buffer, with their per-run tallies."""

    text: bytes
    rows: int
    runs: dict[str, RunTally] = field(default_factory=dict)
    # The request's tool spans (storage/writers/tool_span_store.py), stored in the same commit.
    tools: bytes = b""
    tool_rows: int = 0
    # Spans the writer refused because their run was archived: run id -> (spans, reason).
    refused: dict[str, tuple[int, str]] = field(default_factory=dict)

    @property
    def refused_spans(self) -> int:
        """How many of the request's spans were refused (archived runs)."""
        return sum(count for count, _ in self.refused.values())

    def tool_run_ids(self) -> set[str]:
        """The run ids of the block's tool spans."""
        return {
            _UNESCAPE.sub(_unescaped, line.split(b"\t", 4)[3].decode())
            for line in self.tools.splitlines()
        }

    def refuse_runs(self, reasons: dict[str, str]) -> None:
        """Drop every row (attempts and tool spans) of the runs in ``reasons`` (run id ->
        why) and remember how many went, so the request's answer can say so."""
        escaped = {_text(run_id): run_id for run_id in reasons}
        kept: list[bytes] = []
        for line in self.text.splitlines(keepends=True):
            run_id = escaped.get(line.split(b"\t", _RUN_FIELD + 1)[_RUN_FIELD].decode())
            if run_id is None:
                kept.append(line)
            else:
                self._count_refused(run_id, reasons[run_id])
        if len(kept) != self.rows:
            self.text, self.rows = b"".join(kept), len(kept)
            for run_id in reasons:
                self.runs.pop(run_id, None)
        tools: list[bytes] = []
        for line in self.tools.splitlines(keepends=True):
            run_id = escaped.get(line.split(b"\t", 4)[3].decode())
            if run_id is None:
                tools.append(line)
            else:
                self._count_refused(run_id, reasons[run_id])
        if len(tools) != self.tool_rows:
            self.tools, self.tool_rows = b"".join(tools), len(tools)

    def _count_refused(self, run_id: str, reason: str) -> None:
        count, _ = self.refused.get(run_id, (0, reason))
        self.refused[run_id] = (count + 1, reason)


def _unescaped(match: re.Match[str]) -> str:
    return _UNESCAPED[match.group(1)]


def _larger(current: Any, value: Any) -> Any:
    if value is None:
        return current
    return value if current is None or value > current else current


def _text(value: str) -> str:
    # Four single-character scans beat one regex character class ~10x on long JSON.
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.translate(_ESCAPES)
    return value


def _array(values: list[str] | None) -> str:
    if values is None:
        return _NULL
    quoted = ",".join(f'"{item.translate(_ARRAY_ELEMENT_ESCAPES)}"' for item in values)
    return _text(f"{{{quoted}}}")


def _touch(tally: RunTally, start_ns: int, end_ns: int, queue_wait: float | None) -> None:
    """Record the attempt's end minute, where its interval began, and its length."""
    if queue_wait is None or queue_wait < 0:
        began = start_ns
    else:
        began = start_ns - round(min(queue_wait, _MAX_WAIT_S) * 1e9)
    if end_ns - began > tally.max_slot_ns:
        tally.max_slot_ns = end_ns - began
    end_minute = end_ns - end_ns % MINUTE_NS
    from_minute = began - began % MINUTE_NS
    current = tally.touched.get(end_minute)
    if current is None or from_minute < current:
        tally.touched[end_minute] = from_minute


def _add(tally: RunTally, shard_id: str, end_ns: int, declared: Any, cap: Any, sweep: Any) -> None:
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


def _text_or_null(value: str | None) -> str:
    return _NULL if value is None else _text(value)


def encode_attempts(rows: Iterable[Sequence[Any]]) -> AttemptBlock:
    """Encode rows in ``ATTEMPT_COPY_COLUMNS`` order as COPY text and tally their runs.

    The text's columns are in :data:`ENCODED_COLUMNS` order (numbers first).
    """
    numbers: list[tuple[Any, ...]] = []
    texts: list[str] = []
    runs: dict[str, RunTally] = {}
    arrays: dict[tuple[str, ...], str] = {}
    n = _NULL
    b = _BYTEA_PREFIX
    last_resource: str | None = None
    resource_text = ""
    for row in rows:
        (trace_id, span_id, parent, run_id, shard_id, declared, cap, sweep, call_id,
         explicit, resend, start_ns, end_ns, queue_wait, ttft, prompt, completion,
         reported, cache_read, cache_write, reasoning, model, response_model, provider,
         operation, finish, status, error_type, http_status, convention, span_name, span_kind,
         span_json, resource_json, *quota) = row  # fmt: skip
        # orjson would print NaN or infinity as null: refuse instead of storing NULL.
        if (queue_wait is not None and not isfinite(queue_wait)) or (
            ttft is not None and not isfinite(ttft)
        ):
            raise UnstorableValue(f"non-finite duration in attempt {span_id.hex()}")
        numbers.append(
            (declared, cap, explicit, resend, start_ns, end_ns, queue_wait, ttft, prompt,
             completion, reported, cache_read, cache_write, reasoning, http_status, span_kind,
             *quota)
        )  # fmt: skip
        tally = runs.get(run_id)
        if tally is None:
            tally = runs[run_id] = RunTally(end_ns, end_ns, {shard_id}, declared, cap, sweep, 1)
        else:
            _add(tally, shard_id, end_ns, declared, cap, sweep)
        _touch(tally, start_ns, end_ns, queue_wait)
        retry_after = quota[_RETRY_AFTER]
        if retry_after:  # ingest/quota_headers.py keeps only finite values >= 0
            until = end_ns + round(min(retry_after, _MAX_WAIT_S) * 1e9)
            if until > tally.wait_until_ns:
                tally.wait_until_ns = until
        # One scan of all text columns together; values with a backslash, tab, newline
        # or carriage return (rare) are escaped one by one.
        probe = (
            f"{run_id}{shard_id}{sweep}{call_id}{model}{response_model}{provider}{operation}{status}"
            f"{error_type}{convention}{span_name}{span_json}"
        )
        if "\\" in probe or "\t" in probe or "\n" in probe or "\r" in probe:
            run_id_text, shard_text, call_id, status = (
                _text(run_id),
                _text(shard_id),
                _text(call_id),
                _text(status),
            )
            sweep, model, response_model, provider, operation, error_type, convention = map(
                _text_or_null,
                (sweep, model, response_model, provider, operation, error_type, convention),
            )
            span_name, span_json = _text(span_name), _text(span_json)
        else:
            run_id_text, shard_text = run_id, shard_id
            sweep = n if sweep is None else sweep
            model = n if model is None else model
            response_model = n if response_model is None else response_model
            provider = n if provider is None else provider
            operation = n if operation is None else operation
            error_type = n if error_type is None else error_type
            convention = n if convention is None else convention
        if resource_json is not last_resource:  # one resource per request, usually
            last_resource, resource_text = resource_json, _text(resource_json)
        if finish is None:
            finish_text = n
        else:
            key = tuple(finish)
            finish_text = arrays.get(key) or arrays.setdefault(key, _array(finish))
        texts.append(
            f"{b}{trace_id.hex()}\t{b}{span_id.hex()}\t{n if parent is None else b + parent.hex()}"
            f"\t{run_id_text}\t{shard_text}\t{sweep}\t{call_id}\t{model}\t{response_model}"
            f"\t{provider}\t"
            f"{operation}\t{finish_text}\t{status}\t{error_type}\t{convention}\t{span_name}\t"
            f"{span_json}\t{resource_text}\n"
        )
    if not texts:
        return AttemptBlock(b"", 0, runs)
    # Every number of the block in one C call: orjson prints ints and the shortest
    # round-trip form of floats (what PostgreSQL reads back as the same double), null for
    # None, true/false for booleans. '[[a,b],[c,d]]' becomes 'a\tb' and 'c\td' lines.
    rendered = (
        orjson.dumps(numbers)[2:-2].replace(b",", b"\t").replace(b"]\t[", b"\n")
        .replace(b"null", b"\\N").decode().split("\n")
    )  # fmt: skip
    text = "".join([f"{a}\t{t}" for a, t in zip(rendered, texts, strict=True)])
    return AttemptBlock(text.encode(), len(texts), runs)


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
                    dict(tally.touched),
                    tally.max_slot_ns,
                    tally.wait_until_ns,
                )
            else:
                current.merge(tally)
    return merged
