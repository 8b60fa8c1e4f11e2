"""The OTLP/gRPC listener (port 4317): ``TraceService/Export`` (SPEC §3).

Same path as HTTP (:class:`ingest.export_handler.TraceExportHandler`), same auth, and
the error mapping of :mod:`ingest.error_taxonomy`: ``UNAVAILABLE`` with a
``google.rpc.RetryInfo`` detail when overloaded or the database is down (OTLP spec,
"OTLP/gRPC Throttling"), ``UNAUTHENTICATED`` without a valid ``authorization`` metadata
entry. gRPC itself answers ``RESOURCE_EXHAUSTED`` to messages over 64 MiB.
"""

from __future__ import annotations

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from ingest.auth import TokenVerifier
from ingest.error_taxonomy import IngestError
from ingest.export_handler import TraceExportHandler
from ingest.metrics import IngestMetrics
from ingest.otlp_http_codec import MAX_DECOMPRESSED_BYTES


class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    """``opentelemetry.proto.collector.trace.v1.TraceService`` backed by the export handler."""

    def __init__(
        self, handler: TraceExportHandler, verifier: TokenVerifier, metrics: IngestMetrics
    ) -> None:
        self._handler = handler
        self._verifier = verifier
        self._metrics = metrics

    async def Export(  # the name is fixed by the OTLP service definition
        self,
        request: trace_service_pb2.ExportTraceServiceRequest,
        context: grpc.aio.ServicerContext,
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        """Store the request's spans; answer after commit, or abort with the mapped code."""
        try:
            self._verifier.check_authorization(_metadata_value(context, "authorization"))
            response = await self._handler.export(request)
        except IngestError as err:
            self._metrics.requests.labels("grpc", err.grpc_code.name).inc()
            await context.abort(
                err.grpc_code, err.message, trailing_metadata=err.grpc_trailing_metadata()
            )
            raise  # unreachable: abort raises
        self._metrics.requests.labels("grpc", "OK").inc()
        return response


def _metadata_value(context: grpc.aio.ServicerContext, key: str) -> str | None:
    for item in context.invocation_metadata() or ():
        if item.key == key and isinstance(item.value, str):
            return item.value
    return None


def build_grpc_server(service: TraceService, host: str, port: int) -> grpc.aio.Server:
    """A grpc.aio server with the trace service bound on ``host:port`` (not started)."""
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", MAX_DECOMPRESSED_BYTES),
            ("grpc.so_reuseport", 0),
        ]
    )
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(service, server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if server.add_insecure_port(address) == 0:
        raise OSError(f"cannot bind OTLP/gRPC on {address}")
    return server
