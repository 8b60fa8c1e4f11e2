"""A recording OTLP/HTTP receiver: a real ``POST /v1/traces`` that keeps the decoded spans.

A sink at the exporter seam, for tests that check what the simulator emits without running
ingest and PostgreSQL.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


@dataclass
class RecordedSpan:
    """One received span with plain-Python attribute values."""

    name: str
    trace_id: bytes
    span_id: bytes
    start_ns: int
    end_ns: int
    status_code: int
    attributes: dict[str, Any]
    resource: dict[str, Any]


def plain(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [plain(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


class OtlpRecorder:
    """Spans received so far (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: list[RecordedSpan] = []
        self.url = ""

    def add(self, request: ExportTraceServiceRequest) -> None:
        received = []
        for rs in request.resource_spans:
            resource = {kv.key: plain(kv.value) for kv in rs.resource.attributes}
            for ss in rs.scope_spans:
                for span in ss.spans:
                    received.append(
                        RecordedSpan(
                            name=span.name,
                            trace_id=span.trace_id,
                            span_id=span.span_id,
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            status_code=span.status.code,
                            attributes={kv.key: plain(kv.value) for kv in span.attributes},
                            resource=resource,
                        )
                    )
        with self.lock:
            self.spans.extend(received)


@contextmanager
def recording_otlp_receiver() -> Iterator[OtlpRecorder]:
    """Serve ``/v1/traces`` on a free 127.0.0.1 port; ``recorder.url`` is the endpoint base."""
    recorder = OtlpRecorder()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            recorder.add(request)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    recorder.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()
