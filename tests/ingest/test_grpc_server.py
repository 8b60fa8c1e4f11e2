"""The gRPC listener's seams: requests draw on the body budget shared with OTLP/HTTP."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from tpmledger.ingest.auth import TokenVerifier
from tpmledger.ingest.body_budget import BodyBudget
from tpmledger.ingest.grpc_server import TraceService
from tpmledger.ingest.metrics import IngestMetrics


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

    async def export_payload(self, payload: bytes) -> ExportTraceServiceResponse:
        self.seen.append((payload, self.budget.in_use))
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
