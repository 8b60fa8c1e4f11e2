"""GenAI token-usage metrics from an OTLP metrics export (docs/ingest.md#other-signals).

Instrumentations configured with ``OTEL_EXPORTER_OTLP_ENDPOINT`` send metrics as well as
spans. tpmledger keeps one kind: token usage, so a run's tokens can be counted a second
way and set against its spans (docs/metrics.md#reconciliation). The OTel GenAI
conventions have two shapes of it, and both are read:

- the histogram ``gen_ai.client.token.usage`` (its ``sum``), token type from the
  ``gen_ai.token.type`` attribute (``input`` / ``output``);
- the newer counters ``gen_ai.client.inference.usage.input_tokens`` / ``output_tokens`` /
  ``cache_read.input_tokens`` / ``cache_write.input_tokens`` (or ``cache_creation.…``) /
  ``reasoning.output_tokens`` (their value), token type from the name; and the per-call
  histograms ``gen_ai.client.inference.operation.input_tokens`` / ``output_tokens``.

The shapes count the same tokens, and an SDK moving between convention versions sends
both: per resource of an export, input and output come from the first shape present in
the order above, the others' points are counted as dropped. Cache and reasoning tokens
are subsets of input and output, stored under their own token type. The run and shard
come from the resource attributes as for spans (``tpmledger.run.id`` / ``service.name``;
``tpmledger.shard.id`` / ``service.instance.id`` / ``host.name:process.pid``), the minute
from the point's time. Every other metric is counted and dropped.

A cumulative point belongs to a stream: its run, shard, metric name and point
attributes of every type (strings, numbers, booleans, bytes, arrays, maps). Two points
that differ only by ``stream = true`` / ``false`` (OpenLLMetry) are two streams.

A bad point is rejected alone and reported through OTLP partial success
(``rejected_data_points``): a value that is not a finite number, is negative or is larger
than :data:`MAX_POINT_TOKENS`; a timestamp beyond what PostgreSQL's ``bigint`` holds; a
run or shard id with a NUL character or longer than the span limit. The other points of
the export are stored.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

from tpmledger.durations import MINUTE_NS
from tpmledger.ingest.attribute_values import any_value_to_python, as_text, key_values_to_dict
from tpmledger.ingest.conventions import FIELD_KEYS

TOKEN_USAGE = "gen_ai.client.token.usage"
INFERENCE_USAGE_PREFIX = "gen_ai.client.inference.usage."
INFERENCE_OPERATION_PREFIX = "gen_ai.client.inference.operation."
TOKEN_TYPE_KEY = "gen_ai.token.type"
#: Token types stored; ``input`` + ``output`` are what the reconciliation adds up.
TOKEN_TYPES: Final = ("input", "output", "cache_read", "cache_write", "reasoning")
#: ``gen_ai.client.inference.usage.<suffix>`` counter → token type.
_USAGE_COUNTERS: Final = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_read.input_tokens": "cache_read",
    "cache_write.input_tokens": "cache_write",
    "cache_creation.input_tokens": "cache_write",
    "reasoning.output_tokens": "reasoning",
}
#: ``gen_ai.client.inference.operation.<suffix>`` histogram → token type.
_OPERATION_HISTOGRAMS: Final = {"input_tokens": "input", "output_tokens": "output"}
#: ``gen_ai.token.type`` values of the ``gen_ai.client.token.usage`` histogram.
_DECLARED_TYPES: Final = {"input": "input", "output": "output", "completion": "output"}
# Shapes in the order they are preferred for input and output tokens.
_HISTOGRAM, _COUNTER, _OPERATION = 0, 1, 2
_CUMULATIVE = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE

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
    token_type: str  # one of TOKEN_TYPES
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


def _first_present(resource: dict[str, Any], field: str) -> str | None:
    """The field's value from the first of its keys present, as spans read it (the
    present key wins even when its value is 0 or false)."""
    for key in FIELD_KEYS[field]:
        if key in resource:
            return as_text(resource[key])
    return None


def _identity(resource: dict[str, Any]) -> tuple[str, str]:
    """Run and shard exactly as a span of the same resource gets them
    (ingest/normalize.py): an integer 0 run id is run "0" for both."""
    run = _first_present(resource, "run_id") or "unassigned"
    shard = _first_present(resource, "shard_id")
    if not shard:
        host, pid = _first_present(resource, "host_name"), _first_present(resource, "process_pid")
        shard = (f"{host}:{pid}" if pid else host) if host else "unknown"
    return run, shard


def _shape(metric: Any) -> tuple[int, str | None] | None:
    """(shape, token type from the name) of a token-usage metric, or None for others."""
    name = metric.name
    kind = metric.WhichOneof("data")
    if name == TOKEN_USAGE and kind == "histogram":
        return _HISTOGRAM, None  # the type is a point attribute
    if name.startswith(INFERENCE_USAGE_PREFIX) and kind == "sum":
        token_type = _USAGE_COUNTERS.get(name[len(INFERENCE_USAGE_PREFIX) :])
        return None if token_type is None else (_COUNTER, token_type)
    if name.startswith(INFERENCE_OPERATION_PREFIX) and kind == "histogram":
        token_type = _OPERATION_HISTOGRAMS.get(name[len(INFERENCE_OPERATION_PREFIX) :])
        return None if token_type is None else (_OPERATION, token_type)
    return None


def attribute_identity(items: Iterable[KeyValue]) -> list[str]:
    """Each attribute as ``key=value`` text, sorted, distinct for every OTLP value type.

    Strings and numbers keep the spelling streams were identified by before booleans,
    bytes, arrays and maps were told apart (so their stored streams continue); every other
    type is tagged with its kind and written as canonical JSON.
    """
    parts = []
    for kv in items:
        value = kv.value
        kind = value.WhichOneof("value")
        if kind in ("string_value", "int_value", "double_value"):
            parts.append(f"{kv.key}={getattr(value, kind)}")
        else:
            typed = orjson.dumps(any_value_to_python(value), option=orjson.OPT_SORT_KEYS)
            parts.append(f"{kv.key}=\x1e{kind}:{typed.decode()}")
    return sorted(parts)


def _stream(run: str, shard: str, name: str, items: Any) -> str:
    key = "\x1f".join([run, shard, name, *attribute_identity(items)])
    return hashlib.sha256(key.encode()).hexdigest()


def token_points(request: ExportMetricsServiceRequest) -> MetricsBatch:
    """The token-usage points of ``request`` (and how many other points it held)."""
    batch = MetricsBatch(points=[])
    for resource_metrics in request.resource_metrics:
        run, shard = _identity(key_values_to_dict(resource_metrics.resource.attributes))
        metrics = [m for scope in resource_metrics.scope_metrics for m in scope.metrics]
        shapes = [_shape(metric) for metric in metrics]
        # Input and output from the preferred shape this resource sends (see above).
        preferred = min((shape[0] for shape in shapes if shape is not None), default=None)
        for metric, shape in zip(metrics, shapes, strict=True):
            if shape is None:
                batch.other_points += _count_points(metric, metric.WhichOneof("data"))
            else:
                _add_metric(batch, run, shard, metric, shape, preferred)
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


def _add_metric(
    batch: MetricsBatch,
    run: str,
    shard: str,
    metric: Any,
    shape: tuple[int, str | None],
    preferred: int | None,
) -> None:
    name = metric.name
    rank, named_type = shape
    kind = metric.WhichOneof("data")
    data = getattr(metric, kind)
    cumulative = data.aggregation_temporality == _CUMULATIVE
    for point in data.data_points:
        token_type = named_type
        if token_type is None:
            declared = _attributes(point.attributes).get(TOKEN_TYPE_KEY)
            token_type = _DECLARED_TYPES.get(declared) if isinstance(declared, str) else None
        if token_type is None or (token_type in ("input", "output") and rank != preferred):
            batch.other_points += 1  # not a token type, or counted from another shape
            continue
        value = float(point.sum) if kind == "histogram" else _number(point)
        reason = REASON_ID if _bad_id(run, shard) else _point_reason(value, point)
        if reason is not None:
            batch.reject(reason)
            continue
        batch.points.append(
            TokenPoint(
                run_id=run,
                shard_id=shard,
                minute_ns=point.time_unix_nano // MINUTE_NS * MINUTE_NS,
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
