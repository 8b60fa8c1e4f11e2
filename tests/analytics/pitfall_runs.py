"""Builders of runs with known pitfalls (retry storm, deadline overruns, tools in slots)."""

from __future__ import annotations

import json
import os
from typing import Any

from tests.analytics.seeding import store
from tests.storage.builders import BASE_NS, MINUTE_NS, attempt_row
from tpmledger.storage.server.database import raw_transaction
from tpmledger.storage.writers.tool_span_store import write_tool_spans

SECOND_NS = 1_000_000_000


def minute(i: int) -> str:
    """``minute_utc`` of the i-th minute after BASE_NS (2026-02-01T03:44:00Z)."""
    return f"2026-02-01T03:{44 + i:02d}:00Z"


def storm_rows(run_id: str, storm_minutes: set[int], minutes: int = 6) -> list[tuple[Any, ...]]:
    """20 attempts a minute; storm minutes have 10 retries on 10 first attempts (ratio 1),
    the others 1 retry on 19 (ratio 0.053, under the 0.2 budget)."""
    rows = []
    for m in range(minutes):
        retried = 10 if m in storm_minutes else 1
        for i in range(20):
            call = f"{run_id}-{m}-{i % (20 - retried)}"
            resend = 1 if i >= 20 - retried else 0
            end = BASE_NS + m * MINUTE_NS + (10 + i) * SECOND_NS
            rows.append(
                attempt_row(
                    run_id=run_id,
                    call_id=call,
                    call_id_explicit=True,
                    resend_count=resend,
                    start_ns=end - SECOND_NS,
                    end_ns=end,
                )
            )
    return rows


def deadline_rows(
    run_id: str, *, held_s: list[float], deadline_s: float, on: str = "span"
) -> list[tuple[Any, ...]]:
    """One attempt per entry of ``held_s`` (slot seconds), each declaring ``deadline_s``
    as ``tpmledger.deadline_s`` (``on="span"``) or as a resource request timeout."""
    rows = []
    for i, held in enumerate(held_s):
        end = BASE_NS + (i % 3) * MINUTE_NS + 30 * SECOND_NS
        span_attrs: dict[str, Any] = {"gen_ai.operation.name": "chat"}
        resource: dict[str, Any] = {"service.name": run_id}
        if on == "span":
            span_attrs["tpmledger.deadline_s"] = deadline_s
        else:
            resource["tpmledger.request.timeout_s"] = deadline_s
        rows.append(
            attempt_row(
                run_id=run_id,
                start_ns=end - int(held * SECOND_NS),
                end_ns=end,
                span_attributes=json.dumps(span_attrs),
                resource_attributes=json.dumps(resource),
            )
        )
    return rows


def seed_tool_run(url: str, run_id: str) -> None:
    """Two 10-second slots; in the first slot's trace two tools overlap ([2, 6] s and
    [4, 8] s: 6 s held), a third tool runs after the slot ended, and another trace's tool
    overlaps the second slot in time only. Slot-seconds 20, held by tools 6: share 0.3."""
    trace_a, trace_b, trace_c = os.urandom(16), os.urandom(16), os.urandom(16)
    start = BASE_NS + 10 * SECOND_NS
    rows = [
        attempt_row(run_id=run_id, trace_id=trace_a, start_ns=start, end_ns=start + 10 * SECOND_NS),
        attempt_row(run_id=run_id, trace_id=trace_b, start_ns=start, end_ns=start + 10 * SECOND_NS),
    ]
    store(url, rows)

    def tool(trace: bytes, lo: int, hi: int) -> tuple[Any, ...]:
        return (
            trace,
            os.urandom(8),
            None,
            run_id,
            "0",
            start + lo * SECOND_NS,
            start + hi * SECOND_NS,
            "search",
            "ok",
        )

    with raw_transaction(url) as conn:
        write_tool_spans(
            conn,
            [tool(trace_a, 2, 6), tool(trace_a, 4, 8), tool(trace_a, 12, 15), tool(trace_c, 1, 9)],
        )


def target_rows(run_id: str, cap: int, overlapping: int) -> list[tuple[Any, ...]]:
    """``overlapping`` attempts to one target, all in flight over the same 10 seconds,
    the target's cap declared on the resource; plus one attempt to another model."""
    resource = json.dumps({"tpmledger.target.concurrency.cap": cap})
    start = BASE_NS + 10 * SECOND_NS
    rows = [
        attempt_row(
            run_id=run_id,
            model="gpt-capped",
            provider="openai",
            start_ns=start,
            end_ns=start + 10 * SECOND_NS,
            resource_attributes=resource,
        )
        for _ in range(overlapping)
    ]
    rows.append(attempt_row(run_id=run_id, model="other", start_ns=start, end_ns=start + SECOND_NS))
    return rows
