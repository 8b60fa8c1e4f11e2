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
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from starlette.requests import ClientDisconnect

import tpmledger.read_api as read_api
from tpmledger.ingest.auth import TokenVerifier, bearer_token
from tpmledger.ingest.body_budget import BodyBudget
from tpmledger.ingest.error_taxonomy import IngestError, PayloadTooLarge
from tpmledger.ingest.export_handler import TraceExportHandler
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
from tpmledger.ingest.run_metrics import RunSeriesCollector
from tpmledger.settings import Settings
from tpmledger.storage import migrate
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
    )

    # Bodies held from admission to answer: bounds memory with many senders (README.md#benchmarks).
    if bodies is None:
        bodies = BodyBudget(retry_after_s=settings.retry_after_s if settings else 2)
    budget = bodies
    metrics.body_bytes_in_flight.set_function(lambda: budget.in_use)

    async def require_read(request: Request) -> None:
        """The one read-scope check: the read API, ``/metrics`` (and whatever else reads)
        depend on it. A Bearer header, or the dashboard's login cookie (so its download
        links work); never a token in the URL. Raises Unauthenticated (401) / Forbidden
        (403), answered by the IngestError handler below."""
        token = bearer_token(request.headers.get("authorization"))
        verifier.check_token(token or request.cookies.get(COOKIE), READ)

    app.state.require_read = require_read

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
            verifier.check_authorization(request.headers.get("authorization"), INGEST)
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
                    async for chunk in request.stream():
                        reader.feed(chunk)
                except ClientDisconnect:
                    # The sender went away mid-body; nothing was stored, nobody reads it.
                    return Response(status_code=400)
                payload: bytes | bytearray = reader.finish()  # no copy: it can be 64 MiB
                del reader
                if media != PROTOBUF:
                    payload = decode_request(payload, media).SerializeToString()
                encoded = await handler.encode(payload)
                del payload  # waiting for the commit needs the COPY block, not the body
                response = await handler.store(encoded)
        except IngestError as err:
            metrics.requests.labels("http", str(err.http_status)).inc()
            return error_response(err, error_media)
        metrics.requests.labels("http", "200").inc()
        return Response(encode_message(response, media), media_type=media)

    signals = OtherSignals(database_url, metrics)

    async def read_signal(request: Request) -> tuple[str, bytes]:
        """Auth, type, limits and budget as for traces; the decoded body and its type."""
        verifier.check_authorization(request.headers.get("authorization"), INGEST)
        media = media_type(request.headers.get("content-type"))
        _check_declared_length(request.headers.get("content-length"))
        with bodies.hold(request.headers.get("content-length")) as charge:
            reader = BodyReader(request.headers.get("content-encoding"), on_growth=charge.grow_to)
            async for chunk in request.stream():
                reader.feed(chunk)
            return media, bytes(reader.finish())

    def _media_of(request: Request) -> str | None:
        declared = (request.headers.get("content-type") or "").lower()
        return JSON if declared.startswith(JSON) else None

    async def answer_signal(
        request: Request, message: Message, handle: Callable[[Any], Awaitable[Message]]
    ) -> Response:
        """Read, parse and hand ``message`` to ``handle``; the answer in the request's type."""
        error_media = _media_of(request)
        try:
            media, payload = await read_signal(request)
            error_media = media
            parse(message, payload, media)
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
        return await answer_signal(request, ExportMetricsServiceRequest(), signals.export_metrics)

    @app.post(
        "/v1/logs",
        summary="OTLP/HTTP logs export: accepted, counted and dropped",
        response_class=Response,
    )
    async def export_logs(request: Request) -> Response:
        return await answer_signal(request, ExportLogsServiceRequest(), logs_answer)

    @app.get("/healthz", summary="The process is up")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", summary="The database is reachable and its schema is this code's")
    async def readyz() -> Response:
        reason = await _not_ready_reason(database_url)
        if reason:
            return JSONResponse({"status": "not ready", "reason": reason}, status_code=503)
        return JSONResponse({"status": "ready"})

    resolved = settings or Settings()
    metrics.add_collector(
        RunSeriesCollector(
            database_url,
            window_s=resolved.metrics_run_window_s,
            close_after_s=resolved.minute_close_after_s,
        )
    )

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
