"""OTLP metrics and logs: accepted with the proper answer, so exporters that send every
signal to ``OTEL_EXPORTER_OTLP_ENDPOINT`` do not log failures (docs/ingest.md#other-signals).

Metrics: the GenAI token-usage points are stored per run, shard and minute
(:mod:`ingest.genai_metrics`, :mod:`storage.writers.genai_metric_store`), vLLM / SGLang points per
server and minute (:mod:`ingest.server_metrics_otlp`, :mod:`storage.writers.server_metric_store`);
other points are counted and dropped. Logs are counted and dropped: none is stored, so the
message content that GenAI events sent as log records carry (``gen_ai.user.message`` …
bodies) never reaches the database; those records are counted as content dropped too. Both
go through the same auth, size limits and body budget as traces (the callers apply them).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi.concurrency import run_in_threadpool
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from sqlalchemy.exc import DBAPIError

from tpmledger.ingest.content_filter import log_record_content
from tpmledger.ingest.error_taxonomy import DatabaseUnavailable, UndecodableBody, is_unavailable
from tpmledger.ingest.genai_metrics import token_points
from tpmledger.ingest.metrics import IngestMetrics
from tpmledger.ingest.otlp_http_codec import PROTOBUF
from tpmledger.ingest.server_metrics_otlp import REASON, server_readings
from tpmledger.storage.writers.genai_metric_store import add_token_points
from tpmledger.storage.writers.server_metric_store import add_server_readings

log = logging.getLogger(__name__)


def parse(message: Message, payload: bytes | bytearray, media: str) -> None:
    """Fill ``message`` from a decoded body (protobuf or OTLP/JSON); 400 if it is not one."""
    name = type(message).__name__
    try:
        if media == PROTOBUF:
            message.ParseFromString(bytes(payload))
        else:
            document = json.loads(payload)
            if not isinstance(document, dict):
                raise UndecodableBody("OTLP/JSON body must be a JSON object")
            json_format.ParseDict(document, message, ignore_unknown_fields=True)
    except (DecodeError, json_format.ParseError, RecursionError, ValueError, TypeError) as exc:
        if isinstance(exc, UndecodableBody):
            raise
        raise UndecodableBody(f"invalid {name}: {exc}") from exc


class OtherSignals:
    """The metrics and logs export handlers shared by OTLP/HTTP and OTLP/gRPC."""

    def __init__(self, database_url: str, metrics: IngestMetrics) -> None:
        self._url = database_url
        self._metrics = metrics

    async def export_metrics(
        self, request: ExportMetricsServiceRequest
    ) -> ExportMetricsServiceResponse:
        """Store the token-usage points (one transaction); count the rest. Bad points are
        rejected alone, through partial success (ingest/genai_metrics.py)."""
        batch = token_points(request)
        if batch.points:
            try:
                await run_in_threadpool(add_token_points, self._url, batch.points)
            except DBAPIError as exc:
                if exc.connection_invalidated or is_unavailable(exc.orig or exc, None):
                    raise DatabaseUnavailable("database unavailable; retry later") from exc
                # Never a 500 with SQL in it: the sender is told in one line, the log
                # keeps the details.
                log.exception("the database refused %d token-usage points", len(batch.points))
                batch.reject("the database refused these points", len(batch.points))
                batch.points = []
        # vLLM / SGLang series (docs/metrics.md#serving-side-metrics): among the "other"
        # points of the token-usage batch, kept in their own rows.
        server = server_readings(request)
        batch.other_points -= server.points
        if server.rejected:
            batch.reject(REASON, server.rejected)
        stored_server = server.points - server.rejected
        if len(server):
            try:
                await run_in_threadpool(
                    add_server_readings, self._url, server.gauges, server.counters
                )
            except DBAPIError as exc:
                if exc.connection_invalidated or is_unavailable(exc.orig or exc, None):
                    raise DatabaseUnavailable("database unavailable; retry later") from exc
                log.exception("the database refused %d server metric points", stored_server)
                batch.reject("the database refused these points", stored_server)
                stored_server = 0
        counter = self._metrics.signal_items
        counter.labels("metrics", "stored").inc(len(batch.points) + stored_server)
        counter.labels("metrics", "dropped").inc(batch.other_points)
        counter.labels("metrics", "rejected").inc(batch.rejected)
        response = ExportMetricsServiceResponse()
        if batch.rejected:
            response.partial_success.rejected_data_points = batch.rejected
            response.partial_success.error_message = "; ".join(batch.reject_reasons)
        return response

    def export_logs(self, request: ExportLogsServiceRequest) -> ExportLogsServiceResponse:
        """Count the log records; tpmledger keeps none of them (message content included)."""
        records = content = 0
        for resource in request.resource_logs:
            for scope in resource.scope_logs:
                for record in scope.log_records:
                    records += 1
                    content += log_record_content(
                        _event_name(record),
                        (kv.key for kv in record.attributes),
                        record.HasField("body"),
                    )
        self._metrics.signal_items.labels("logs", "dropped").inc(records)
        if content:
            self._metrics.content_dropped.labels("log_record").inc(content)
        return ExportLogsServiceResponse()


def _event_name(record: Any) -> str:
    # The LogRecord's own event_name (OTLP 1.5+), else the attribute older SDKs and
    # LiteLLM set.
    if record.event_name:
        return str(record.event_name)
    for kv in record.attributes:
        if kv.key in _EVENT_NAME_KEYS and kv.value.HasField("string_value"):
            return str(kv.value.string_value)
    return ""


_EVENT_NAME_KEYS = frozenset({"event.name", "event_name"})
