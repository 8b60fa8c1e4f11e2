"""Small builders for attempt rows in ``ATTEMPT_COPY_COLUMNS`` order."""

from __future__ import annotations

import json
import os
from typing import Any

from tpmledger.storage.schema.models import ATTEMPT_COPY_COLUMNS

MINUTE_NS = 60 * 1_000_000_000
BASE_NS = 1_769_917_440 * 1_000_000_000  # 2026-02-01T03:44:00Z


def attempt_row(**fields: Any) -> tuple[Any, ...]:
    """One attempt row with sensible defaults; any column can be overridden by name."""
    span_id = fields.get("span_id", os.urandom(8))
    row: dict[str, Any] = {
        "trace_id": os.urandom(16),
        "span_id": span_id,
        "parent_span_id": None,
        "run_id": "run-a",
        "shard_id": "0",
        "declared_shard_count": 8,
        "concurrency_cap": 16,
        "sweep_id": None,
        "call_id": span_id.hex(),
        "call_id_explicit": False,
        "resend_count": None,
        "start_ns": BASE_NS,
        "end_ns": BASE_NS + 2_000_000_000,
        "queue_wait_s": None,
        "ttft_s": None,
        "prompt_tokens": 100,
        "completion_tokens": 50,
        "reported_total_tokens": None,
        "cache_read_tokens": None,
        "cache_write_tokens": None,
        "reasoning_tokens": None,
        "model": "gpt-test",
        "response_model": None,
        "provider": "openai",
        "operation_name": "chat",
        "finish_reasons": ["stop"],
        "status": "ok",
        "error_type": None,
        "http_status": 200,
        "convention": "semconv",
        "span_name": "chat gpt-test",
        "span_kind": 3,
        "span_attributes": json.dumps({"gen_ai.operation.name": "chat"}),
        "resource_attributes": json.dumps({"service.name": "test"}),
        "quota_tpm_declared": None,
        "quota_rpm_declared": None,
        "ratelimit_limit_tokens": None,
        "ratelimit_limit_requests": None,
        "ratelimit_remaining_tokens": None,
        "ratelimit_remaining_requests": None,
        "retry_after_s": None,
        "quota_values_ignored": 0,
    }
    unknown = set(fields) - set(row)
    assert not unknown, f"unknown attempt columns: {unknown}"
    row.update(fields)
    return tuple(row[c] for c in ATTEMPT_COPY_COLUMNS)
