"""The attempt columns the bulk path writes, in COPY order (no SQLAlchemy import).

Ingest's normalizer processes import this module alone, so they stay small.
"""

from __future__ import annotations

# Columns written by the bulk path, in COPY order. Ingest produces rows in this order.
ATTEMPT_COPY_COLUMNS: tuple[str, ...] = (
    "trace_id",
    "span_id",
    "parent_span_id",
    "run_id",
    "shard_id",
    "declared_shard_count",
    "concurrency_cap",
    "sweep_id",
    "call_id",
    "call_id_explicit",
    "resend_count",
    "start_ns",
    "end_ns",
    "queue_wait_s",
    "ttft_s",
    "prompt_tokens",
    "completion_tokens",
    "reported_total_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "model",
    "provider",
    "operation_name",
    "finish_reasons",
    "status",
    "error_type",
    "http_status",
    "convention",
    "span_name",
    "span_kind",
    "span_attributes",
    "resource_attributes",
)
