"""The gRPC listener's seams: requests draw on the body budget shared with OTLP/HTTP."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans

from tpmledger.ingest.auth import TokenVerifier
from tpmledger.ingest.body_budget import BodyBudget
from tpmledger.ingest.grpc_server import SignalServices, TraceService, message_encoding
from tpmledger.ingest.metrics import IngestMetrics

MIB = 1024 * 1024


class Aborted(Exception):
    pass


class FakeContext:
    """Stands in for grpc.aio.ServicerContext: no metadata; abort records and raises."""

    code: grpc.StatusCode | None = None

    def invocation_metadata(self) -> tuple[Any, ...]:
        return ()

    async def abort(self, code: grpc.StatusCode, message: str, **_: Any) -> None:
        self.code = code
        raise Aborted(message)


class RecordingHandler:
    def __init__(self, budget: BodyBudget) -> None:
        self.budget = budget
        self.seen: list[tuple[bytes, int]] = []

    def check_admission(self) -> None:
        pass

    async def encode(self, payload: bytes) -> bytes:
        self.seen.append((bytes(payload), self.budget.in_use))
        return bytes(payload)

    async def store(self, encoded: bytes) -> ExportTraceServiceResponse:
        return ExportTraceServiceResponse()


def test_grpc_requests_draw_on_the_shared_body_budget() -> None:
    budget = BodyBudget(max_bytes=100)
    handler = RecordingHandler(budget)
    service = TraceService(handler, TokenVerifier(None), IngestMetrics(), budget)  # type: ignore[arg-type]
    payload = b"x" * 20
    with budget.hold("90"):  # OTLP/HTTP holds most of the budget
        context = FakeContext()
        with pytest.raises(Aborted):
            asyncio.run(service.export(payload, context))
        assert context.code == grpc.StatusCode.UNAVAILABLE
    assert handler.seen == []
    asyncio.run(service.export(payload, FakeContext()))
    assert handler.seen == [(payload, 20)]  # held while being stored
    assert budget.in_use == 0


def _service(budget: BodyBudget) -> tuple[TraceService, RecordingHandler]:
    handler = RecordingHandler(budget)
    service = TraceService(handler, TokenVerifier(None), IngestMetrics(), budget)  # type: ignore[arg-type]
    return service, handler


@pytest.mark.parametrize("compress", [gzip.compress, zlib.compress])
def test_a_compressed_message_is_inflated_here_and_charged_what_it_inflates_to(
    compress: Callable[[bytes], bytes],
) -> None:
    budget = BodyBudget(max_bytes=4 * MIB)
    service, handler = _service(budget)
    # A valid request (counted before it is decoded): a 3 MiB field the count skips.
    message = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(schema_url="x" * 3 * MIB)]
    ).SerializeToString()
    asyncio.run(service.export(compress(message), FakeContext()))
    assert handler.seen == [(message, len(message))]  # charged the inflated size
    assert budget.in_use == 0


def test_a_bomb_stops_at_the_budget_before_it_is_whole() -> None:
    budget = BodyBudget(max_bytes=4 * MIB)
    service, handler = _service(budget)
    context = FakeContext()
    with pytest.raises(Aborted, match="in-flight body budget"):
        asyncio.run(service.export(gzip.compress(bytes(63 * MIB)), context))
    assert context.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert handler.seen == []
    assert budget.in_use == 0


def test_a_bomb_is_refused_while_other_bodies_hold_the_budget() -> None:
    budget = BodyBudget(max_bytes=4 * MIB)
    service, _ = _service(budget)
    context = FakeContext()
    with budget.hold(str(2 * MIB)) as held, pytest.raises(Aborted):
        held.grow_to(2 * MIB)  # another body, 2 MiB of it received
        asyncio.run(service.export(gzip.compress(bytes(3 * MIB)), context))
    assert context.code == grpc.StatusCode.UNAVAILABLE  # retry later, like HTTP's 503


@pytest.mark.parametrize("method", ["export_metrics", "export_logs"])
def test_metrics_and_logs_are_charged_too(method: str) -> None:
    budget = BodyBudget(max_bytes=4 * MIB)
    signals = SignalServices(None, TokenVerifier(None), IngestMetrics(), budget)  # type: ignore[arg-type]
    context = FakeContext()
    with pytest.raises(Aborted, match="in-flight body budget"):
        asyncio.run(getattr(signals, method)(gzip.compress(bytes(63 * MIB)), context))
    assert context.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert budget.in_use == 0


def test_an_otlp_request_is_never_taken_for_a_compressed_one() -> None:
    request = ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.add(name="chat")
    assert message_encoding(request.SerializeToString()) == "identity"
    assert message_encoding(b"") == "identity"
    assert message_encoding(gzip.compress(b"x")) == "gzip"
    assert message_encoding(zlib.compress(b"x")) == "deflate"
