"""The OTLP/HTTP listener (port 4318): ``POST /v1/traces``, health, metrics, read API.

Order of checks on ``POST /v1/traces`` (docs/ingest.md): auth (401) → content type (415) →
declared length (413) → queue admission and the in-flight body budget of
:mod:`ingest.body_budget` (503, before the body is read, and again while its
decompressed bytes grow) → streamed, size-limited decoding of the body (413 / 415 /
400) → decode (400) → normalize → group commit (503 when overloaded or the database is
down) → 200 with an ``ExportTraceServiceResponse`` in the request's encoding. Error bodies are a
``google.rpc.Status`` in the request's encoding (OTLP spec, "OTLP/HTTP Response").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import JSONResponse, Response
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from starlette.requests import ClientDisconnect

import tpmledger.read_api as read_api
from tpmledger.host_names import HostNames
from tpmledger.ingest.auth import TokenVerifier, bearer_token
from tpmledger.ingest.body_budget import BodyBudget
from tpmledger.ingest.error_taxonomy import BodyTimeout, IngestError, PayloadTooLarge
from tpmledger.ingest.export_handler import TraceExportHandler
from tpmledger.ingest.host_check import HostCheck
from tpmledger.ingest.metrics import IngestMetrics
from tpmledger.ingest.other_signals import OtherSignals, parse
from tpmledger.ingest.otlp_http_codec import (
    JSON,
    MAX_COMPRESSED_BYTES,
    PROTOBUF,
    BodyReader,
    decode_request,
    encode_message,
    media_type,
)
from tpmledger.ingest.request_limits import counted
from tpmledger.ingest.run_metrics import RunSeriesCollector
from tpmledger.ingest.server_series import ServerSeriesCollector
from tpmledger.settings import Settings
from tpmledger.storage.server import migrate
from tpmledger.token_scopes import COOKIE, INGEST, READ

log = logging.getLogger(__name__)

_READY_TIMEOUT_S = 3.0


def build_app(
    handler: TraceExportHandler,
    *,
    database_url: str,
    verifier: TokenVerifier,
    metrics: IngestMetrics,
    settings: Settings | None = None,
    bodies: BodyBudget | None = None,
) -> FastAPI:
    """The FastAPI app of the ingest HTTP listener (``settings`` go to the read API;
    ``bodies`` is the in-flight body budget, shared with the gRPC listener)."""
    app = FastAPI(
        title="tpmledger",
        summary="OTLP/HTTP trace ingest and the read API of tpmledger",
        version="1",
        # Served below behind the read scope: the API's description is not for anyone.
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    resolved = settings or Settings()
    hosts = HostNames(resolved.host, resolved.allowed_hosts)
    app.add_middleware(HostCheck, hosts=hosts, tokens_required=lambda: verifier.required)

    # Bodies held from admission to answer: bounds memory with many senders (README.md#benchmarks).
    if bodies is None:
        bodies = BodyBudget(retry_after_s=settings.retry_after_s if settings else 2)
    budget = bodies
    metrics.body_bytes_in_flight.set_function(lambda: budget.in_use)
    resolved = settings or Settings()
    stall_s, read_s = resolved.body_stall_s, resolved.body_read_s

    async def require_read(request: Request) -> None:
        """The one read-scope check: the read API, ``/metrics`` (and whatever else reads)
        depend on it. A Bearer header, or the dashboard's login cookie (so its download
        links work); never a token in the URL. Raises Unauthenticated (401) / Forbidden
        (403), answered by the IngestError handler below."""
        token = bearer_token(request.headers.get("authorization"))
        await verifier.admit(token or request.cookies.get(COOKIE), READ)

    app.state.require_read = require_read
    read_scope = [Depends(require_read)]

    @app.get("/openapi.json", include_in_schema=False, dependencies=read_scope)
    async def openapi_document() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=read_scope)
    async def swagger_ui() -> Response:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="tpmledger API")

    @app.get("/redoc", include_in_schema=False, dependencies=read_scope)
    async def redoc() -> Response:
        return get_redoc_html(openapi_url="/openapi.json", title="tpmledger API")

    @app.exception_handler(IngestError)
    async def _answer_ingest_error(request: Request, err: IngestError) -> Response:
        return error_response(err, JSON)

    @app.post(
        "/v1/traces",
        summary="OTLP/HTTP trace export (protobuf or OTLP/JSON; gzip/deflate)",
        response_class=Response,
    )
    async def export_traces(request: Request) -> Response:
        content_type = request.headers.get("content-type")
        error_media = JSON if (content_type or "").lower().startswith(JSON) else None
        try:
            await verifier.admit_authorization(request.headers.get("authorization"), INGEST)
            media = media_type(content_type)
            error_media = media
            _check_declared_length(request.headers.get("content-length"))
            handler.check_admission()  # overloaded: refuse before reading the body
            # 503 past the budget: charged the decompressed bytes as they grow, and held
            # until the answer (the COPY block replaces the body while the commit waits).
            with bodies.hold(request.headers.get("content-length")) as charge:
                reader = BodyReader(
                    request.headers.get("content-encoding"), on_growth=charge.grow_to
                )
                try:
                    async for chunk in body_chunks(request, stall_s=stall_s, total_s=read_s):
                        reader.feed(chunk)
                except ClientDisconnect:
                    # The sender went away mid-body; nothing was stored, nobody reads it.
                    return Response(status_code=400)
                payload: bytes | bytearray = reader.finish()  # no copy: it can be 64 MiB
                del reader
                # Counted (413 past a limit) and charged what decoding builds, then
                # decoded off the event loop: a worker process, or a thread for JSON.
                await counted(payload, "traces", media == JSON, charge)
                if media != PROTOBUF:
                    payload = await asyncio.to_thread(_json_to_protobuf, payload)
                encoded = await handler.encode(payload)
                del payload  # waiting for the commit needs the COPY block, not the body
                response = await handler.store(encoded)
        except IngestError as err:
            metrics.requests.labels("http", str(err.http_status)).inc()
            return error_response(err, error_media)
        metrics.requests.labels("http", "200").inc()
        return Response(encode_message(response, media), media_type=media)

    signals = OtherSignals(database_url, metrics)

    def _media_of(request: Request) -> str | None:
        declared = (request.headers.get("content-type") or "").lower()
        return JSON if declared.startswith(JSON) else None

    async def answer_signal(
        request: Request,
        message: Message,
        signal: str,
        handle: Callable[[Any], Awaitable[Message]],
    ) -> Response:
        """Auth, type, limits and budget as for traces; read, count, parse (off the event
        loop) and hand ``message`` to ``handle``; the answer in the request's type."""
        error_media = _media_of(request)
        try:
            await verifier.admit_authorization(request.headers.get("authorization"), INGEST)
            media = media_type(request.headers.get("content-type"))
            error_media = media
            _check_declared_length(request.headers.get("content-length"))
            with bodies.hold(request.headers.get("content-length")) as charge:
                encoding = request.headers.get("content-encoding")
                reader = BodyReader(encoding, on_growth=charge.grow_to)
                async for chunk in body_chunks(request, stall_s=stall_s, total_s=read_s):
                    reader.feed(chunk)
                payload = reader.finish()
                del reader
                await counted(payload, signal, media == JSON, charge)
                await asyncio.to_thread(parse, message, payload, media)
                del payload
                answer = await handle(message)
        except ClientDisconnect:
            return Response(status_code=400)
        except IngestError as err:
            metrics.requests.labels("http", str(err.http_status)).inc()
            return error_response(err, error_media)
        metrics.requests.labels("http", "200").inc()
        return Response(encode_message(answer, media), media_type=media)

    async def logs_answer(message: Any) -> Message:
        return signals.export_logs(message)

    @app.post(
        "/v1/metrics",
        summary="OTLP/HTTP metrics export: GenAI token usage is kept, other points dropped",
        response_class=Response,
    )
    async def export_metrics(request: Request) -> Response:
        return await answer_signal(
            request, ExportMetricsServiceRequest(), "metrics", signals.export_metrics
        )

    @app.post(
        "/v1/logs",
        summary="OTLP/HTTP logs export: accepted, counted and dropped",
        response_class=Response,
    )
    async def export_logs(request: Request) -> Response:
        return await answer_signal(request, ExportLogsServiceRequest(), "logs", logs_answer)

    @app.get("/healthz", summary="The process is up")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(
        "/readyz",
        summary="The database is reachable, its schema is this code's, and commits are moving",
    )
    async def readyz() -> Response:
        stalled = handler.writer_stalled_s()
        reason = (
            f"the commit writer has been waiting {stalled:.0f} s for one transaction "
            "(a lock held or the database stalled: see docs/operations.md#bounded-queries)"
            if stalled > resolved.commit_stuck_after_s
            else await _not_ready_reason(database_url)
        )
        if reason:
            return JSONResponse({"status": "not ready", "reason": reason}, status_code=503)
        return JSONResponse({"status": "ready"})

    metrics.add_collector(
        RunSeriesCollector(
            database_url,
            window_s=resolved.metrics_run_window_s,
            close_after_s=resolved.minute_close_after_s,
        )
    )
    metrics.add_collector(ServerSeriesCollector(database_url))

    @app.get(
        "/metrics",
        summary="Prometheus metrics: this ingest process and per-run series "
        "(docs/operations.md#per-run-series); OpenMetrics when the Accept header asks",
        dependencies=[Depends(require_read)],
    )
    async def prometheus_metrics(request: Request) -> Response:
        # The per-run series read the database: off the event loop, which serves ingest.
        body, content_type = await run_in_threadpool(
            metrics.render_for, request.headers.get("accept")
        )
        return Response(body, media_type=content_type)

    app.include_router(
        read_api.build_router(database_url, settings), dependencies=[Depends(require_read)]
    )
    return app


def error_response(err: IngestError, media: str | None) -> Response:
    """An error answer: ``google.rpc.Status`` body (JSON if the request's type is unknown)."""
    media = media or JSON
    headers: dict[str, Any] = err.http_headers()
    if err.http_status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return Response(
        encode_message(err.to_status(), media),
        status_code=err.http_status,
        media_type=media,
        headers=headers,
    )


def _json_to_protobuf(payload: bytes | bytearray) -> bytes:
    return decode_request(payload, JSON).SerializeToString()


async def body_chunks(request: Request, *, stall_s: float, total_s: float) -> AsyncIterator[bytes]:
    """The body's chunks as they arrive; :class:`BodyTimeout` (408) when the next chunk
    takes longer than ``stall_s`` or the whole body longer than ``total_s``. A stalled
    upload then costs only its own connection: the caller's budget charge is released
    when the error leaves its ``hold`` block. (A generator, so that no frame of the
    wait holds the caller's reader: an exception's traceback would keep its decoded
    body alive until a garbage collection.)"""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + total_s
    chunks = request.stream().__aiter__()
    while True:
        wait = min(stall_s, deadline - loop.time())
        if wait <= 0:
            raise BodyTimeout(f"request body not received within {total_s:g} s")
        try:
            chunk = await asyncio.wait_for(anext(chunks, None), wait)
        except TimeoutError:
            raise BodyTimeout(
                f"no body bytes for {wait:g} s (TPMLEDGER_BODY_STALL_S / TPMLEDGER_BODY_READ_S)"
            ) from None
        if chunk is None:
            return
        yield chunk


def _check_declared_length(content_length: str | None) -> None:
    if content_length and content_length.isdigit() and int(content_length) > MAX_COMPRESSED_BYTES:
        raise PayloadTooLarge(f"body over {MAX_COMPRESSED_BYTES} bytes")


async def _not_ready_reason(database_url: str) -> str | None:
    try:
        # Behind or ahead of this code: not ready, saying what to do (never migrated here).
        return await asyncio.wait_for(
            asyncio.to_thread(migrate.schema_problem, database_url), _READY_TIMEOUT_S
        )
    except Exception as exc:  # unreachable, refused, timed out: all mean "not ready"
        return f"database unreachable: {type(exc).__name__}"
