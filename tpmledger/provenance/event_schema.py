"""Names and types of the canonical event file's keys (docs/provenance.md,
``tpmledger.events.v1``)."""

from __future__ import annotations

import polars as pl

EVENTS_FORMAT = "tpmledger.events.v1"

# Keys of one event line, in JCS (sorted) order, with their column types.
EVENT_SCHEMA: dict[str, pl.DataType] = {
    "call_id": pl.String(),
    "completion_tokens": pl.Int64(),
    "end_ns": pl.Int64(),
    "error_type": pl.String(),
    "http_status": pl.Int64(),
    "model": pl.String(),
    "prompt_tokens": pl.Int64(),
    "queue_wait_s": pl.Float64(),
    "resend_count": pl.Int64(),
    "run_id": pl.String(),
    "shard_id": pl.String(),
    "span_id": pl.String(),
    "start_ns": pl.Int64(),
    "status": pl.String(),
    "trace_id": pl.String(),
    "ttft_s": pl.Float64(),
}
EVENT_COLUMNS: tuple[str, ...] = tuple(EVENT_SCHEMA)
# Integer columns published as decimal strings (nanoseconds exceed 2^53).
NS_COLUMNS = frozenset({"start_ns", "end_ns"})
ORDER_COLUMNS = ("end_ns", "trace_id", "span_id")
