"""The OTLP/gRPC listener (port 4317): ``TraceService/Export`` (docs/ingest.md).

Same path as HTTP (:class:`ingest.export_handler.TraceExportHandler`), same auth, and
the error mapping of :mod:`ingest.error_taxonomy`: ``UNAVAILABLE`` with a
``google.rpc.RetryInfo`` detail when overloaded or the database is down (OTLP spec,
"OTLP/gRPC Throttling"), ``INVALID_ARGUMENT`` for undecodable requests,
``UNAUTHENTICATED`` without a valid ``authorization`` metadata entry.

Messages are charged to the in-flight body budget of :mod:`ingest.body_budget` (shared with
OTLP/HTTP) **while they decompress**, for traces, metrics and logs alike: gRPC's own
per-message decompression is turned off, so gRPC hands over the bytes as they came off
the wire (at most 16 MiB, the HTTP limit: ``RESOURCE_EXHAUSTED`` past it), and
:func:`read_message` inflates them as a stream, a step at a time, each step charged
first. With gRPC decompressing, every concurrent call inflated its whole message (up to
64 MiB) before any budget saw it: 40 gzip bombs of 63 MiB took ingest to 7.8 GB
(bench/grpc_bombs.py). gRPC does not pass the ``grpc-encoding`` header to the handler;
a compressed message is recognised by its gzip or zlib header, which an OTLP request
(a protobuf whose first field is 1, byte ``0x0a``) never starts with.

At most :data:`MAX_CONCURRENT_RPCS` calls are handled at once; up to
:data:`MAX_QUEUED_RPCS` more wait their turn in a queue (:class:`CallQueue`), in arrival
order. A call beyond those is answered ``UNAVAILABLE`` with a ``google.rpc.RetryInfo``
detail (retry after ``TPMLEDGER_RETRY_AFTER_S``), which every OTLP exporter retries
(issue 41: above 8 calls ingest answered ``RESOURCE_EXHAUSTED`` without RetryInfo, and
16 shards flushing together lost 23 of 80 exports on the first try; Go and Collector
exporters drop a batch on that). gRPC itself takes at most the sum of both (its own
refusal past that is the last resort, never reached by a fleet of that size): a waiting
call holds its compressed message (at most 16 MiB) outside the body budget.

The method is registered with the service and method names of the
``opentelemetry-proto`` stubs but receives the request as raw bytes: the normalizer reads
the wire format directly, so the full message is never built just to be re-encoded.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from tpmledger.ingest.auth import TokenVerifier
from tpmledger.ingest.body_budget import BodyBudget, BodyCharge
from tpmledger.ingest.error_taxonomy import IngestError, Overloaded
from tpmledger.ingest.export_handler import TraceExportHandler
from tpmledger.ingest.metrics import IngestMetrics
from tpmledger.ingest.other_signals import OtherSignals, parse
from tpmledger.ingest.otlp_http_codec import MAX_COMPRESSED_BYTES, PROTOBUF, BodyReader
from tpmledger.ingest.request_limits import counted

# "opentelemetry.proto.collector.trace.v1.TraceService", as in the generated stubs.
SERVICE_NAME = trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"].full_name
METRICS_SERVICE = metrics_service_pb2.DESCRIPTOR.services_by_name["MetricsService"].full_name
LOGS_SERVICE = logs_service_pb2.DESCRIPTOR.services_by_name["LogsService"].full_name

#: Calls handled at once (the rest wait in gRPC, unread); each holds at most its
#: compressed message (16 MiB) outside the body budget.
MAX_CONCURRENT_RPCS = 8
#: Calls that wait for a turn before new ones are answered UNAVAILABLE + RetryInfo.
MAX_QUEUED_RPCS = 56
_GZIP_MAGIC = b"\x1f\x8b"


class CallQueue:
    """Turns for gRPC calls: ``concurrent`` at once, ``queued`` more waiting in order;
    past that, :class:`Overloaded` (``UNAVAILABLE`` with RetryInfo)."""

    def __init__(
        self,
        concurrent: int = MAX_CONCURRENT_RPCS,
        queued: int = MAX_QUEUED_RPCS,
        *,
        retry_after_s: int = 2,
    ) -> None:
        self._turns = asyncio.Semaphore(concurrent)
        self.queued = queued
        self.waiting = 0
        self.retry_after_s = retry_after_s

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Wait for a turn (raises :class:`Overloaded` when the queue is full)."""
        if self._turns.locked() and self.waiting >= self.queued:
            raise Overloaded(
                f"{self.waiting} gRPC calls are waiting already; retry later",
                retry_after_s=self.retry_after_s,
            )
        self.waiting += 1
        try:
            await self._turns.acquire()
        finally:
            self.waiting -= 1
        try:
            yield
        finally:
            self._turns.release()


def message_encoding(message: bytes) -> str:
    """``gzip``, ``deflate`` (zlib, gRPC's "deflate") or ``identity``, from the first bytes."""
    if message[:2] == _GZIP_MAGIC:
        return "gzip"
    if len(message) >= 2 and message[0] == 0x78 and (message[0] << 8 | message[1]) % 31 == 0:
        return "deflate"
    return "identity"


def read_message(message: bytes, charge: BodyCharge) -> bytes | bytearray:
    """The decompressed message, charged to ``charge`` as it inflates (413 when it alone
    passes the budget, 503 when the bodies in flight would, 400 when it is corrupt)."""
    encoding = message_encoding(message)
    if encoding == "identity":
        return message
    reader = BodyReader(encoding, on_growth=charge.grow_to)
    try:
        reader.feed(message)
        return reader.finish()
    except IngestError:
        reader.discard()  # not held by the traceback until a garbage collection
        raise


class TraceService:
    """``TraceService/Export`` backed by the export handler."""

    def __init__(
        self,
        handler: TraceExportHandler,
        verifier: TokenVerifier,
        metrics: IngestMetrics,
        bodies: BodyBudget | None = None,
        calls: CallQueue | None = None,
    ) -> None:
        self._handler = handler
        self._verifier = verifier
        self._metrics = metrics
        self._calls = calls or CallQueue()
        # Charged from the compressed message on, as it inflates, until the answer
        # (shared with OTLP/HTTP).
        self._bodies = bodies or BodyBudget()

    async def export(
        self, payload: bytes, context: grpc.aio.ServicerContext
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        """Store the request's spans; answer after commit, or abort with the mapped code."""
        try:
            await self._verifier.admit_authorization(_metadata_value(context, "authorization"))
            self._handler.check_admission()
            async with self._calls.turn():
                response = await self._export(payload)
        except IngestError as err:
            self._metrics.requests.labels("grpc", err.grpc_code.name).inc()
            await context.abort(
                err.grpc_code, err.message, trailing_metadata=err.grpc_trailing_metadata()
            )
            raise  # unreachable: abort raises
        self._metrics.requests.labels("grpc", "OK").inc()
        return response

    async def _export(self, payload: bytes) -> trace_service_pb2.ExportTraceServiceResponse:
        self._handler.check_admission()  # the commit queue may have filled while it waited
        with self._bodies.hold(str(len(payload))) as charge:
            body = read_message(payload, charge)
            del payload
            await counted(body, "traces", False, charge)  # 413 past a count limit
            encoded = await self._handler.encode(body)
            del body  # waiting for the commit needs the COPY block, not the body
            return await self._handler.store(encoded)

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
        calls: CallQueue | None = None,
    ) -> None:
        self._calls = calls or CallQueue()
        self._signals = signals
        self._verifier = verifier
        self._metrics = metrics
        self._bodies = bodies or BodyBudget()

    async def _check(self, payload: bytes, context: grpc.aio.ServicerContext) -> None:
        await self._verifier.admit_authorization(_metadata_value(context, "authorization"))

    async def export_metrics(
        self, payload: bytes, context: grpc.aio.ServicerContext
    ) -> metrics_service_pb2.ExportMetricsServiceResponse:
        try:
            await self._check(payload, context)
            async with self._calls.turn():
                with self._bodies.hold(str(len(payload))) as charge:
                    request = metrics_service_pb2.ExportMetricsServiceRequest()
                    body = read_message(payload, charge)
                    await counted(body, "metrics", False, charge)
                    await asyncio.to_thread(parse, request, body, PROTOBUF)
                    del body
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
            async with self._calls.turn():
                with self._bodies.hold(str(len(payload))) as charge:
                    request = logs_service_pb2.ExportLogsServiceRequest()
                    body = read_message(payload, charge)
                    await counted(body, "logs", False, charge)
                    await asyncio.to_thread(parse, request, body, PROTOBUF)
                    del body
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
    service: TraceService,
    host: str,
    port: int,
    signals: SignalServices | None = None,
    *,
    max_concurrent_rpcs: int = MAX_CONCURRENT_RPCS + MAX_QUEUED_RPCS,
) -> grpc.aio.Server:
    """A grpc.aio server with the trace service (and the metrics and logs services, when
    given) bound on ``host:port`` (not started)."""
    server = grpc.aio.server(
        options=[
            # Messages arrive as sent; read_message inflates them against the budget.
            ("grpc.per_message_decompression", 0),
            ("grpc.max_receive_message_length", MAX_COMPRESSED_BYTES),
            # Waiting calls get one flow-control window, not a window grown by BDP probes.
            ("grpc.http2.bdp_probe", 0),
            ("grpc.so_reuseport", 0),  # a second server on the same port must fail, not share
        ],
        maximum_concurrent_rpcs=max_concurrent_rpcs,
    )
    server.add_generic_rpc_handlers((service.handler(),))
    if signals is not None:
        server.add_generic_rpc_handlers(signals.handlers())
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if server.add_insecure_port(address) == 0:
        raise OSError(f"cannot bind OTLP/gRPC on {address}")
    return server
