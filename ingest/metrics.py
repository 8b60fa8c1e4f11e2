"""Prometheus metrics of one ingest process (docs/ingest.md ``/metrics``).

A private registry per process keeps tests that build several apps independent.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST, choose_encoder
from prometheus_client.registry import Collector

# Commit latencies span a few ms (small groups) to seconds (50k-span groups, slow disks).
_COMMIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class IngestMetrics:
    """Counters and gauges updated by the export path and the group-commit writer."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.signal_items = Counter(
            "tpmledger_ingest_signal_items",
            "Metric data points and log records received (signal; kept = stored or dropped)",
            ["signal", "kept"],
            registry=r,
        )
        self.spans_received = Counter(
            "tpmledger_ingest_spans_received", "Spans in decoded export requests", registry=r
        )
        self.spans_stored = Counter(
            "tpmledger_ingest_spans_stored",
            "LLM-call spans committed as new attempts (re-sent spans are not counted)",
            registry=r,
        )
        self.spans_ignored = Counter(
            "tpmledger_ingest_spans_ignored", "Spans that are not LLM calls", registry=r
        )
        self.spans_rejected = Counter(
            "tpmledger_ingest_spans_rejected",
            "Invalid spans reported back through OTLP partial success",
            registry=r,
        )
        self.content_dropped = Counter(
            "tpmledger_ingest_content_attributes_dropped",
            "Message-content values left out of storage (prompts, completions, tool "
            "arguments; docs/configuration.md#message-content), by source: span_attribute, "
            "resource_attribute, span_event, log_record",
            ["source"],
            registry=r,
        )
        self.internal_errors = Counter(
            "tpmledger_ingest_internal_errors",
            "Requests answered 503 because normalizing or storing failed unexpectedly (a bug, "
            "not bad input: the sender retries); stage is normalize or store",
            ["stage"],
            registry=r,
        )
        self.internal_errors.labels("normalize")
        self.internal_errors.labels("store")
        self.requests = Counter(
            "tpmledger_ingest_requests",
            "Export requests by transport and answer",
            ["transport", "outcome"],
            registry=r,
        )
        self.queue_depth_spans = Gauge(
            "tpmledger_ingest_queue_depth_spans",
            "Spans waiting for (or in) the current group commit",
            registry=r,
        )
        self.queue_depth_requests = Gauge(
            "tpmledger_ingest_queue_depth_requests",
            "Requests waiting for (or in) the current group commit",
            registry=r,
        )
        self.body_bytes_in_flight = Gauge(
            "tpmledger_ingest_body_bytes_in_flight",
            "Decompressed bytes of request bodies held, charged to the in-flight body budget",
            registry=r,
        )
        self.cache_bytes = Gauge(
            "tpmledger_ingest_cache_bytes",
            "Bytes held by the normalizer's caches (cache: attributes = decoded attribute "
            "encodings, plans = attribute-key shapes), summed over the normalizer processes",
            ["cache"],
            registry=r,
        )
        self.commit_latency = Histogram(
            "tpmledger_ingest_commit_latency_seconds",
            "Wall time of one group-commit transaction (COPY + merge + commit)",
            buckets=_COMMIT_BUCKETS,
            registry=r,
        )
        self.commit_group_requests = Histogram(
            "tpmledger_ingest_commit_group_requests",
            "Requests committed together in one transaction",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128),
            registry=r,
        )

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)

    def render_for(self, accept: str | None) -> tuple[bytes, str]:
        """Every metric in the format the scraper asked for (OpenMetrics when its
        ``Accept`` header prefers it, else the Prometheus text format) and its content type."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    def add_collector(self, collector: Collector) -> None:
        """Series computed at scrape time (the per-run series of docs/operations.md)."""
        self.registry.register(collector)
