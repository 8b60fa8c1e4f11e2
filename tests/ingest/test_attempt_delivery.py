"""HTTP attempts and their LLM call counted exactly once, whatever the delivery
(docs/conventions.md#attempts): children before their parent, parents first across two
ingest processes, re-sends, a parent that never arrives.

The spans are real: one worker minute (tests/ingest/family_worker.py, the ``openai`` SDK
under OTel contrib ``openai-v2`` and the httpx instrumentation) against the quota provider,
kept instead of exported. The test then delivers the same spans to running ingest
processes in different orders (as a run of its own each) and compares what they seal.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from tests.fixtures.servers import RunningIngest, free_port, start_ingest
from tests.ingest.quota_provider import (
    COMPLETION_TOKENS,
    PROMPT_TOKENS,
    QuotaProvider,
    serve_quota_provider,
)
from tests.ingest.test_family_attempts import first_minute_ns, run_worker
from tpmledger.analytics.live.live_updater import LiveUpdater
from tpmledger.analytics.seal.sealing import seal_run

CALLS = 7
PROTOBUF = {"Content-Type": "application/x-protobuf"}


@pytest.fixture
def second_ingest(database_url: str) -> Iterator[RunningIngest]:
    server = start_ingest(database_url)
    try:
        yield server
    finally:
        server.stop()


def _recorded(tmp_path: Path) -> tuple[ExportTraceServiceRequest, QuotaProvider]:
    quota = QuotaProvider()
    dump = tmp_path / "spans.bin"
    with serve_quota_provider(free_port(), quota) as base_url:
        run_worker(
            {
                "family": "openai-v2",
                "base_url": base_url,
                "dump": str(dump),
                "resource": {"tpmledger.run.id": "recorded", "tpmledger.shard.id": "0"},
                "calls": CALLS,
                "start_ns": first_minute_ns() + 5_000_000_000,
            }
        )
    return ExportTraceServiceRequest.FromString(dump.read_bytes()), quota


def _spans(request: ExportTraceServiceRequest) -> list[Span]:
    return [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]


def _send(
    ingest: RunningIngest, template: ExportTraceServiceRequest, run_id: str, spans: list[Span]
) -> None:
    resource = ResourceSpans()
    resource.resource.CopyFrom(template.resource_spans[0].resource)
    for attribute in resource.resource.attributes:
        if attribute.key == "tpmledger.run.id":
            attribute.value.CopyFrom(AnyValue(string_value=run_id))
    # Each delivery is a run of its own: its own trace ids (a stored (trace_id, span_id)
    # is never stored again), the same in every span of a trace.
    tag = sum(run_id.encode()) % 256
    copies = []
    for span in spans:
        copy = Span()
        copy.CopyFrom(span)
        copy.trace_id = bytes([tag]) + span.trace_id[1:]
        copies.append(copy)
    resource.scope_spans.append(ScopeSpans(spans=copies))
    body = ExportTraceServiceRequest(resource_spans=[resource]).SerializeToString()
    answer = httpx.post(f"{ingest.http_url}/v1/traces", content=body, headers=PROTOBUF)
    assert answer.status_code == 200, answer.text


def _is_http(span: Span) -> bool:
    return any(a.key in ("http.request.method", "http.method") for a in span.attributes)


def _events(ingest: RunningIngest, run_id: str) -> str:
    seal_run(ingest.database_url, run_id)
    answer = httpx.get(f"{ingest.http_url}/v1/runs/{run_id}/events.jsonl", timeout=30)
    assert answer.status_code == 200
    text = answer.text.replace(f'"run_id":"{run_id}"', '"run_id":"R"')
    return re.sub(r'"trace_id":"[0-9a-f]{2}', '"trace_id":"..', text)


def _run(ingest: RunningIngest, run_id: str) -> dict[str, Any]:
    return httpx.get(f"{ingest.http_url}/v1/runs/{run_id}", timeout=30).json()


@pytest.mark.slow
def test_any_delivery_order_counts_each_attempt_once(
    tmp_path: Path, running_ingest: RunningIngest, second_ingest: RunningIngest
) -> None:
    request, quota = _recorded(tmp_path)
    spans = _spans(request)
    children = [s for s in spans if _is_http(s)]
    parents = [s for s in spans if not _is_http(s)]
    assert (len(children), len(parents)) == (len(quota.log), CALLS)
    ok = [a for a in quota.log if a.status == 200]
    a, b = running_ingest, second_ingest

    # All at once, as the exporter sent them.
    _send(a, request, "whole", spans)
    whole = _events(a, "whole")
    assert whole.count("\n") == len(quota.log)

    # Every child first, one request each; the live figures are kept between the two.
    updater = LiveUpdater(a.database_url)
    for span in children:
        _send(a, request, "children-first", [span])
    updater.update_once()
    for span in parents:
        _send(a, request, "children-first", [span])
    updater.update_once()
    live = _run(a, "children-first")
    assert live.get("live") is True, live
    assert live["attempts"] == len(quota.log)
    assert live["tokens"]["prompt"] == len(ok) * PROMPT_TOKENS
    assert live["tokens"]["completion"] == len(ok) * COMPLETION_TOKENS
    assert _events(a, "children-first") == whole

    # Parents first, alternating between two ingest processes, then everything re-sent.
    for index, span in enumerate(parents + children):
        _send((a, b)[index % 2], request, "replicas", [span])
    _send(b, request, "replicas", spans)
    _send(a, request, "replicas", list(reversed(spans)))
    assert _events(b, "replicas") == whole
    run = _run(a, "replicas")
    assert run["attempts_source"] == "http_client_spans"
    assert run["logical_calls"] == CALLS

    # A parent that never arrives: its requests are the attempts of a call of their own.
    retried = {s.parent_span_id for s in children}
    lost = next(p for p in parents if sum(c.parent_span_id == p.span_id for c in children) > 1)
    _send(a, request, "orphans", [s for s in spans if s is not lost])
    orphaned = _events(a, "orphans")
    assert orphaned.count("\n") == len(quota.log)
    run = _run(a, "orphans")
    assert run["logical_calls"] == CALLS
    assert len(retried) == CALLS
    lost_call = lost.span_id.hex()
    lines = [line for line in orphaned.splitlines() if f'"call_id":"{lost_call}"' in line]
    assert len(lines) == sum(c.parent_span_id == lost.span_id for c in children)
    assert all('"model":null' in line for line in lines)


@pytest.mark.slow
def test_a_run_without_http_children_counts_llm_spans_and_says_how_to_measure_retries(
    tmp_path: Path, running_ingest: RunningIngest
) -> None:
    quota = QuotaProvider()
    dump = tmp_path / "spans.bin"
    with serve_quota_provider(free_port(), quota) as base_url:
        run_worker(
            {
                "family": "openai-v2",
                "base_url": base_url,
                "dump": str(dump),
                "http": False,
                "resource": {"tpmledger.run.id": "llm-only", "tpmledger.shard.id": "0"},
                "calls": CALLS,
                "start_ns": first_minute_ns() + 5_000_000_000,
            }
        )
    request = ExportTraceServiceRequest.FromString(dump.read_bytes())
    _send(running_ingest, request, "llm-only", _spans(request))
    seal_run(running_ingest.database_url, "llm-only")
    run = _run(running_ingest, "llm-only")
    assert run["attempts"] == CALLS  # one per call: the SDK's retries are hidden
    assert len(quota.log) > CALLS
    assert run["attempts_source"] == "llm_spans"
    assert run["retry_rate"] is None
    assert "opentelemetry-instrumentation-httpx" in run["retry_rate_not_measured_because"]
    # Every call that failed was rate limited, recognised from openai-v2's error.type.
    failed = CALLS - sum(1 for a in quota.log if a.status == 200)
    assert run["attempt_success_rate"] == pytest.approx((CALLS - failed) / CALLS)
    targets = httpx.get(f"{running_ingest.http_url}/v1/runs/llm-only/targets").json()["targets"]
    assert [(t["provider"], t["model"]) for t in targets] == [("openai", "gpt-4o-mini")]
    assert sum(m["rate_limited"] for m in targets[0]["minutes"]) == failed
