"""The OTLP/gRPC listener (port 4317): ``TraceService/Export`` (docs/ingest.md).

Same path as HTTP (:class:`ingest.export_handler.TraceExportHandler`), same auth, and
the error mapping of :mod:`ingest.error_taxonomy`: ``UNAVAILABLE`` with a
``google.rpc.RetryInfo`` detail when overloaded or the database is down (OTLP spec,
"OTLP/gRPC Throttling"), ``INVALID_ARGUMENT`` for undecodable requests,
``UNAUTHENTICATED`` without a valid ``authorization`` metadata entry. gRPC itself answers
``RESOURCE_EXHAUSTED`` to messages over 64 MiB.

The method is registered with the service and method names of the
``opentelemetry-proto`` stubs but receives the request as raw bytes: the normalizer reads
the wire format directly, so the full message is never built just to be re-encoded.
"""

from __future__ import annotations

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tpmledger.ingest.auth import TokenVerifier
from tpmledger.ingest.body_budget import BodyBudget
from tpmledger.ingest.error_taxonomy import IngestError
from tpmledger.ingest.export_handler import TraceExportHandler
from tpmledger.ingest.metrics import IngestMetrics
from tpmledger.ingest.other_signals import OtherSignals, parse
from tpmledger.ingest.otlp_http_codec import MAX_DECOMPRESSED_BYTES, PROTOBUF

# "opentelemetry.proto.collector.trace.v1.TraceService", as in the generated stubs.
SERVICE_NAME = trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name
METRICS_SERVICE = metrics_service_pb2.DESCRIPTOR.services_by_name["MetricsService"].full_name
LOGS_SERVICE = logs_service_pb2.DESCRIPTOR.services_by_name["LogsService"].full_name


class TraceService:
    """``TraceService/Export`` backed by the export handler."""

    def __init__(
        self,
        handler: TraceExportHandler,
        verifier: TokenVerifier,
        metrics: IngestMetrics,
        bodies: BodyBudget | None = None,
    ) -> None:
        self._handler = handler
        self._verifier = verifier
        self._metrics = metrics
        # gRPC has read the message already; the budget still bounds how many requests
        # are held while they are normalized and committed (shared with OTLP/HTTP).
        self._bodies = bodies or BodyBudget()

    async def export(
        self, payload: bytes, context: grpc.aio.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        """Store the request's spans; answer after commit, or abort with the mapped code."""
        try:
            self._verifier.check_authorization(_metadata_value(context, "authorization"))
            self._handler.check_admission()
            with self._bodies.hold(str(len(payload))):
                response = await self._handler.export_payload(payload)
        except IngestError as err:
            self._metrics.requests.labels("grpc", err.grpc_code.name).inc()
            await context.abort(
                err.grpc_code, err.message, trailing_metadata=err.grpc_trailing_metadata()
            )
            raise  # unreachable: abort raises
        self._metrics.requests.labels("grpc", "OK").inc()
        return response

    def handler(self) -> grpc.GenericRpcHandler:
        """The generic handler that routes ``TraceService/Export`` here (request as bytes)."""
        export = grpc.unary_unary_rpc_method_handler(
            self.export,
            request_deserializer=None,  # raw bytes
            response_serializer=trace_service_pb2.ExportTraceServiceResponse.SerializeToString,
        )
        return grpc.method_handlers_generic_handler(SERVICE_NAME, {"Export": export})


class SignalServices:
    """``MetricsService/Export`` and ``LogsService/Export`` (ingest/other_signals.py)."""

    def __init__(
        self,
        signals: OtherSignals,
        verifier: TokenVerifier,
        metrics: IngestMetrics,
        bodies: BodyBudget | None = None,
    ) -> None:
        self._signals = signals
        self._verifier = verifier
        self._metrics = metrics
        self._bodies = bodies or BodyBudget()

    async def _check(self, payload: bytes, context: grpc.aio.ServicerContext) -> None:
        self._verifier.check_authorization(_metadata_value(context, "authorization"))

    async def export_metrics(
        self, payload: bytes, context: grpc.aio.ServicerContext
    ) -> metrics_service_pb2.ExportMetricsServiceResponse:
        try:
            await self._check(payload, context)
            with self._bodies.hold(str(len(payload))):
                request = metrics_service_pb2.ExportMetricsServiceRequest()
                parse(request, payload, PROTOBUF)
                response = await self._signals.export_metrics(request)
        except IngestError as err:
            await self._abort(err, context)
            raise  # unreachable: abort raises
        self._metrics.requests.labels("grpc", "OK").inc()
        return response

    async def export_logs(
        self, payload: bytes, context: grpc.aio.ServicerContext
    ) -> logs_service_pb2.ExportLogsServiceResponse:
        try:
            await self._check(payload, context)
            request = logs_service_pb2.ExportLogsServiceRequest()
            parse(request, payload, PROTOBUF)
            response = self._signals.export_logs(request)
        except IngestError as err:
            await self._abort(err, context)
            raise  # unreachable: abort raises
        self._metrics.requests.labels("grpc", "OK").inc()
        return response

    async def _abort(self, err: IngestError, context: grpc.aio.ServicerContext) -> None:
        self._metrics.requests.labels("grpc", err.grpc_code.name).inc()
        await context.abort(
            err.grpc_code, err.message, trailing_metadata=err.grpc_trailing_metadata()
        )

    def handlers(self) -> tuple[grpc.GenericRpcHandler, ...]:
        """Generic handlers routing the two services' ``Export`` here (request as bytes)."""
        metrics_export = grpc.unary_unary_rpc_method_handler(
            self.export_metrics,
            request_deserializer=None,
            response_serializer=metrics_service_pb2.ExportMetricsServiceResponse.SerializeToString,
        )
        logs_export = grpc.unary_unary_rpc_method_handler(
            self.export_logs,
            request_deserializer=None,
            response_serializer=logs_service_pb2.ExportLogsServiceResponse.SerializeToString,
        )
        return (
            grpc.method_handlers_generic_handler(METRICS_SERVICE, {"Export": metrics_export}),
            grpc.method_handlers_generic_handler(LOGS_SERVICE, {"Export": logs_export}),
        )


def _metadata_value(context: grpc.aio.ServicerContext, key: str) -> str | None:
    for item in context.invocation_metadata() or ():
        if item.key == key and isinstance(item.value, str):
            return item.value
    return None


def build_grpc_server(
    service: TraceService, host: str, port: int, signals: SignalServices | None = None
) -> grpc.aio.Server:
    """A grpc.aio server with the trace service (and the metrics and logs services, when
    given) bound on ``host:port`` (not started)."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_DECOMPRESSED_BYTES),
            ("grpc.so_reuseport", 0),  # a second server on the same port must fail, not share
        ]
    )
    server.add_generic_rpc_handlers((service.handler(),))
    if signals is not None:
        server.add_generic_rpc_handlers(signals.handlers())
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if server.add_insecure_port(address) == 0:
        raise OSError(f"cannot bind OTLP/gRPC on {address}")
    return server
