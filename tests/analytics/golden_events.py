"""A hand-built event set whose figures are worked out by hand in the tests.

Minute 0 = 2026-02-01T03:44:00Z. Shards "a" (cap 1) and "b" (cap 1). Seconds are
offsets from minute 0. Every call id is explicit and every event carries resend_count.

    span  shard call start end  prompt compl status  ttft  queue  minute
    e1    a     c1     0   10   100    50    ok      0.1   -      0
    e2    b     c2     5   20   200    100   ok      0.3   -      0
    e3    a     c3    12   30   -      -     error   -     -      0   (rate_limit, retried)
    e4    a     c3    40   70   300    60    ok      0.5   10     1   (resend_count 1)
    e5    b     c4    65   90   50     250   ok      0.2   -      1
    e6    b     c6   170  185   350    310   ok      0.4   -      3
    e7    a     c7   230  245   10     400   ok      -     5      4
    e8    a     c5   228  250   -      -     error   -     -      4   (timeout, not retried)
"""

from __future__ import annotations

from typing import Any

import polars as pl

from tpmledger.provenance.event_file import EVENT_SCHEMA

MINUTE0_NS = 1_769_917_440 * 1_000_000_000  # 2026-02-01T03:44:00Z
S = 1_000_000_000
CAPS = {"a": 1, "b": 1}

_TABLE = [
    # span, shard, call, start, end, prompt, completion, status, error, http, ttft, queue, resend
    ("e1", "a", "c1", 0, 10, 100, 50, "ok", None, 200, 0.1, None, 0),
    ("e2", "b", "c2", 5, 20, 200, 100, "ok", None, 200, 0.3, None, 0),
    ("e3", "a", "c3", 12, 30, None, None, "error", "rate_limit", 429, None, None, 0),
    ("e4", "a", "c3", 40, 70, 300, 60, "ok", None, 200, 0.5, 10.0, 1),
    ("e5", "b", "c4", 65, 90, 50, 250, "ok", None, 200, 0.2, None, 0),
    ("e6", "b", "c6", 170, 185, 350, 310, "ok", None, 200, 0.4, None, 0),
    ("e7", "a", "c7", 230, 245, 10, 400, "ok", None, 200, None, 5.0, 0),
    ("e8", "a", "c5", 228, 250, None, None, "error", "timeout", None, None, None, 0),
]


def golden_records(**overrides: Any) -> list[dict[str, Any]]:
    """The eight events as dicts (canonical keys); ``overrides`` apply to every record."""
    records = []
    for (
        span,
        shard,
        call,
        start,
        end,
        prompt,
        completion,
        status,
        error,
        http,
        ttft,
        queue,
        resend,
    ) in _TABLE:
        record = {
            "call_id": call,
            "completion_tokens": completion,
            "end_ns": MINUTE0_NS + end * S,
            "error_type": error,
            "http_status": http,
            "model": "gpt-golden",
            "prompt_tokens": prompt,
            "queue_wait_s": queue,
            "resend_count": resend,
            "run_id": "golden",
            "shard_id": shard,
            "span_id": f"{int(span[1:]):016x}",
            "start_ns": MINUTE0_NS + start * S,
            "status": status,
            "trace_id": f"{int(span[1:]):032x}",
            "ttft_s": ttft,
        }
        record.update(overrides)
        records.append(record)
    return records


def golden_events(**overrides: Any) -> pl.DataFrame:
    """The golden events as a canonical frame."""
    return pl.DataFrame(golden_records(**overrides), schema=EVENT_SCHEMA)
