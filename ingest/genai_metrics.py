"""GenAI token-usage metrics from an OTLP metrics export (docs/ingest.md#other-signals).

Instrumentations configured with ``OTEL_EXPORTER_OTLP_ENDPOINT`` send metrics as well as
spans. tpmledger keeps one kind: token usage, so a run's tokens can be counted a second
way and set against its spans (docs/metrics.md#reconciliation). A point counts when its
metric is

- ``gen_ai.client.token.usage`` (a histogram; its ``sum``), or
- a ``gen_ai.client.inference.usage.*`` counter (a sum; its value),

and its token type is ``input`` or ``output``: the ``gen_ai.token.type`` attribute, else
the metric name's ``input``/``output`` part. The run and shard come from the resource
attributes as for spans (``tpmledger.run.id`` / ``service.name``; ``tpmledger.shard.id`` /
``service.instance.id`` / ``host.name:process.pid``), the minute from the point's time.
Every other metric is counted and dropped.

A bad point is rejected alone and reported through OTLP partial success
(``rejected_data_points``): a value that is not a finite number, is negative or is larger
than :data:`MAX_POINT_TOKENS`; a timestamp beyond what PostgreSQL's ``bigint`` holds; a
run or shard id with a NUL character or longer than the span limit. The other points of
the export are stored.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, Final

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

TOKEN_USAGE = "gen_ai.client.token.usage"
INFERENCE_USAGE_PREFIX = "gen_ai.client.inference.usage."
TOKEN_TYPE_KEY = "gen_ai.token.type"
_CUMULATIVE = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
_MINUTE_NS = 60_000_000_000
#: The largest token count one point may carry: beyond it a double no longer counts
#: whole tokens exactly (and sums could overflow).
MAX_POINT_TOKENS: Final = float(2**53)
_MAX_NS: Final = 2**63 - 1  # timestamps are stored as bigint
_MAX_ID_CHARS: Final = 512  # as for spans (ingest/span_validation.py)
REASON_NOT_FINITE: Final = "token-usage point is NaN or infinite"
REASON_NEGATIVE: Final = "token-usage point is negative"
REASON_TOO_LARGE: Final = f"token-usage point is larger than {MAX_POINT_TOKENS:.0f}"
REASON_TIME: Final = "token-usage point time is beyond 2262-04-11"
REASON_ID: Final = (
    f"run or shard id longer than {_MAX_ID_CHARS} characters or holding a NUL character"
)


@dataclass(frozen=True)
class TokenPoint:
    """One data point of token usage: a delta, or a cumulative value of ``stream``."""

    run_id: str
    shard_id: str
    minute_ns: int
    token_type: str  # "input" | "output"
    value: float
    cumulative: bool
    stream: str  # SHA-256 of the stream's identity (resource, metric, point attributes)
    start_ns: int


@dataclass
class MetricsBatch:
    """What one export holds for tpmledger."""

    points: list[TokenPoint]
    other_points: int = 0  # points of metrics tpmledger does not keep
    rejected: int = 0  # bad token-usage points (reported through partial success)
    reject_reasons: list[str] = field(default_factory=list)  # distinct, first ones first

    def reject(self, reason: str, count: int = 1) -> None:
        """Count ``count`` points rejected for ``reason``."""
        self.rejected += count
        if reason not in self.reject_reasons:
            self.reject_reasons.append(reason)


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind in ("string_value", "int_value", "double_value") else None


def _attributes(items: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in items}


def _identity(resource: dict[str, Any]) -> tuple[str, str]:
    run = resource.get("tpmledger.run.id") or resource.get("service.name") or "unassigned"
    shard = resource.get("tpmledger.shard.id") or resource.get("service.instance.id")
    if not shard:
        host, pid = resource.get("host.name"), resource.get("process.pid")
        shard = (f"{host}:{pid}" if pid else str(host)) if host else "unknown"
    return str(run), str(shard)


def _token_type(name: str, attributes: dict[str, Any]) -> str | None:
    declared = attributes.get(TOKEN_TYPE_KEY)
    if declared in ("input", "output"):
        return str(declared)
    if name.startswith(INFERENCE_USAGE_PREFIX):
        rest = name[len(INFERENCE_USAGE_PREFIX) :]
        for kind in ("input", "output"):
            if kind in rest:
                return kind
    return None


def _stream(run: str, shard: str, name: str, items: Any) -> str:
    key = "\x1f".join([run, shard, name, *sorted(f"{kv.key}={_value(kv.value)}" for kv in items)])
    return hashlib.sha256(key.encode()).hexdigest()


def token_points(request: ExportMetricsServiceRequest) -> MetricsBatch:
    """The token-usage points of ``request`` (and how many other points it held)."""
    batch = MetricsBatch(points=[])
    for resource_metrics in request.resource_metrics:
        run, shard = _identity(_attributes(resource_metrics.resource.attributes))
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                _add_metric(batch, run, shard, metric)
    return batch


def _bad_id(*ids: str) -> bool:
    return any(len(value) > _MAX_ID_CHARS or "\x00" in value for value in ids)


def _point_reason(value: float, point: Any) -> str | None:
    """Why a token-usage point cannot be stored, or None."""
    if not math.isfinite(value):
        return REASON_NOT_FINITE
    if value < 0:
        return REASON_NEGATIVE
    if value > MAX_POINT_TOKENS:
        return REASON_TOO_LARGE
    if point.time_unix_nano > _MAX_NS or point.start_time_unix_nano > _MAX_NS:
        return REASON_TIME
    return None


def _add_metric(batch: MetricsBatch, run: str, shard: str, metric: Any) -> None:
    name = metric.name
    kind = metric.WhichOneof("data")
    if name == TOKEN_USAGE and kind == "histogram":
        data, reading = metric.histogram, "sum"
    elif name.startswith(INFERENCE_USAGE_PREFIX) and kind == "sum":
        data, reading = metric.sum, "value"
    else:
        batch.other_points += _count_points(metric, kind)
        return
    cumulative = data.aggregation_temporality == _CUMULATIVE
    for point in data.data_points:
        token_type = _token_type(name, _attributes(point.attributes))
        if token_type is None:
            batch.other_points += 1
            continue
        value = float(point.sum) if reading == "sum" else _number(point)
        reason = REASON_ID if _bad_id(run, shard) else _point_reason(value, point)
        if reason is not None:
            batch.reject(reason)
            continue
        batch.points.append(
            TokenPoint(
                run_id=run,
                shard_id=shard,
                minute_ns=point.time_unix_nano // _MINUTE_NS * _MINUTE_NS,
                token_type=token_type,
                value=value,
                cumulative=cumulative,
                stream=_stream(run, shard, name, point.attributes),
                start_ns=int(point.start_time_unix_nano),
            )
        )


def _number(point: Any) -> float:
    return float(point.as_double if point.WhichOneof("value") == "as_double" else point.as_int)


def _count_points(metric: Any, kind: str | None) -> int:
    data = getattr(metric, kind) if kind else None
    return len(data.data_points) if data is not None and hasattr(data, "data_points") else 0
