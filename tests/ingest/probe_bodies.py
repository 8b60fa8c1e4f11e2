"""The issue-41 amplification probes: a few kilobytes on the wire that decode into
millions of empty spans, data points or log records (docs/ingest.md#limits).

Shared by tests/ingest/test_amplification.py and bench/ingest_probes.py.
"""

from __future__ import annotations

import gzip


def _delimited(tag: int, payload: bytes) -> bytes:
    out = bytearray([tag])
    size = len(payload)
    while size >= 0x80:
        out.append((size & 0x7F) | 0x80)
        size >>= 7
    out.append(size)
    return bytes(out) + payload


def json_empty_spans(count: int) -> bytes:
    """gzip'd OTLP/JSON: one scope of ``count`` empty spans (5.2 M: ~15 KB)."""
    body = b'{"resourceSpans":[{"scopeSpans":[{"spans":[' + b",".join([b"{}"] * count) + b"]}]}]}"
    return gzip.compress(body, 9)


def protobuf_empty_spans(count: int) -> bytes:
    """gzip'd protobuf ExportTraceServiceRequest of ``count`` empty spans (7.5 M: ~15 KB)."""
    return gzip.compress(_delimited(0x0A, _delimited(0x12, b"\x12\x00" * count)), 9)


def json_empty_points(count: int) -> bytes:
    """gzip'd OTLP/JSON metrics: one gauge of ``count`` empty data points."""
    points = b",".join([b"{}"] * count)
    body = (
        b'{"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"m","gauge":{"dataPoints":['
        + points
        + b"]}}]}]}]}"
    )
    return gzip.compress(body, 9)


def protobuf_empty_points(count: int) -> bytes:
    """gzip'd protobuf ExportMetricsServiceRequest: a gauge of ``count`` empty points."""
    gauge = _delimited(0x2A, b"\x0a\x00" * count)  # Metric.gauge → Gauge.data_points
    metric = _delimited(0x12, b"\x0a\x01m" + gauge)
    return gzip.compress(_delimited(0x0A, _delimited(0x12, metric)), 9)


def json_empty_records(count: int) -> bytes:
    """gzip'd OTLP/JSON logs: one scope of ``count`` empty log records."""
    records = b",".join([b"{}"] * count)
    body = b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[' + records + b"]}]}]}"
    return gzip.compress(body, 9)


def protobuf_empty_records(count: int) -> bytes:
    """gzip'd protobuf ExportLogsServiceRequest of ``count`` empty log records."""
    return gzip.compress(_delimited(0x0A, _delimited(0x12, b"\x12\x00" * count)), 9)


def protobuf_empty_attributes(count: int) -> bytes:
    """gzip'd protobuf: one span holding ``count`` empty attributes."""
    return gzip.compress(_delimited(0x0A, _delimited(0x12, _delimited(0x12, b"\x4a\x00" * count))))


#: (signal path, media type, body) of every probe, as the issue ran them.
def probes() -> list[tuple[str, str, str, bytes]]:
    return [
        ("json spans 5.2M", "/v1/traces", "application/json", json_empty_spans(5_200_000)),
        (
            "protobuf spans 7.5M",
            "/v1/traces",
            "application/x-protobuf",
            protobuf_empty_spans(7_500_000),
        ),
        (
            "protobuf attributes 7M",
            "/v1/traces",
            "application/x-protobuf",
            protobuf_empty_attributes(7_000_000),
        ),
        ("json points 5.2M", "/v1/metrics", "application/json", json_empty_points(5_200_000)),
        (
            "protobuf points 7.5M",
            "/v1/metrics",
            "application/x-protobuf",
            protobuf_empty_points(7_500_000),
        ),
        ("json records 5.2M", "/v1/logs", "application/json", json_empty_records(5_200_000)),
        (
            "protobuf records 7.5M",
            "/v1/logs",
            "application/x-protobuf",
            protobuf_empty_records(7_500_000),
        ),
    ]
