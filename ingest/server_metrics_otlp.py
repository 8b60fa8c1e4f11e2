"""vLLM and SGLang metrics arriving as OTLP (docs/metrics.md#serving-side-metrics).

What an OpenTelemetry Collector sends when its Prometheus receiver scrapes the servers:
the same names (``vllm:num_requests_running`` …; a counter with or without ``_total``),
gauges as OTLP gauges, counters as monotonic sums, latency histograms as histograms (their
sum and count are read). The server instance is the resource's ``service.instance.id``
(the receiver sets it to the target's ``host:port``), else ``server.address`` and
``server.port``, else ``host.name``; the run, when named, is ``tpmledger.run.id`` on the
point or the resource. Points of other metrics are left to :mod:`ingest.genai_metrics`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

from tpmledger.durations import MINUTE_NS
from tpmledger.ingest.server_metrics import (
    GAUGES,
    HISTOGRAMS,
    CounterReading,
    GaugeCombiner,
    ServerReadings,
    counter_field,
    is_server_metric,
    key_of,
    stream_id,
    usable,
)

_DELTA = metrics_pb2.AGGREGATION_TEMPORALITY_DELTA
_MAX_NS = 2**63 - 1  # times are stored as bigint


#: Partial-success reason of a rejected server point.
REASON: Final = (
    "vLLM/SGLang metric point is not a finite non-negative number, has no time or one beyond "
    "2262-04-11, or "
    "names a model or run longer than 512 characters or holding a NUL character"
)


def _attributes(items: Any) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for kv in items:
        value: AnyValue = kv.value
        kind = value.WhichOneof("value")
        if kind in ("string_value", "int_value", "double_value"):
            found[kv.key] = getattr(value, kind)
    return found


def _instance(resource: dict[str, Any]) -> str:
    found = resource.get("service.instance.id")
    if found:
        return str(found)
    address, port = resource.get("server.address"), resource.get("server.port")
    if address:
        return f"{address}:{port}" if port else str(address)
    return str(resource.get("host.name") or "unknown")


def _number(point: Any) -> float:
    return float(point.as_double if point.WhichOneof("value") == "as_double" else point.as_int)


def server_readings(request: ExportMetricsServiceRequest) -> ServerReadings:
    """The vLLM / SGLang readings of an export (``points``: how many points they were)."""
    readings = ServerReadings()
    gauges = GaugeCombiner()
    for resource_metrics in request.resource_metrics:
        resource = _attributes(resource_metrics.resource.attributes)
        instance = _instance(resource)
        run = resource.get("tpmledger.run.id")
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if is_server_metric(metric.name):
                    _read(readings, gauges, instance, run, metric)
    readings.gauges.extend(gauges.readings())
    return readings


def _read(
    readings: ServerReadings, gauges: GaugeCombiner, instance: str, run: Any, metric: Any
) -> None:
    name, kind = metric.name, metric.WhichOneof("data")
    counter = counter_field(name)
    fields: list[tuple[str, Callable[[Any], float]]]
    if kind == "gauge" and name in GAUGES:
        engine, field = GAUGES[name]
        points, fields = metric.gauge.data_points, [(field, _number)]
    elif kind == "sum" and counter is not None:
        engine, field = counter
        points, fields = metric.sum.data_points, [(field, _number)]
    elif kind == "histogram" and name in HISTOGRAMS:
        engine, sum_field, count_field = HISTOGRAMS[name]
        points = metric.histogram.data_points
        fields = [(sum_field, lambda p: float(p.sum)), (count_field, lambda p: float(p.count))]
    else:
        return
    data = getattr(metric, kind)
    delta = getattr(data, "aggregation_temporality", None) == _DELTA
    for point in points:
        readings.points += 1
        labels = _attributes(point.attributes)
        if run and not any(labels.get(k) for k in ("tpmledger.run.id", "tpmledger_run_id")):
            labels["tpmledger.run.id"] = run
        key = key_of(instance, engine, labels)
        at = int(point.time_unix_nano)
        values = [(f, read(point)) for f, read in fields]
        if key is None or not 0 < at <= _MAX_NS or not all(usable(v) for _, v in values):
            readings.rejected += 1
            continue
        for field, value in values:
            if kind == "gauge":
                gauges.add(key, at, field, value)
                continue
            readings.counters.append(
                CounterReading(
                    key=key,
                    minute_ns=at // MINUTE_NS * MINUTE_NS,
                    field=field,
                    stream=stream_id(instance, f"{name}/{field}", labels),
                    start_ns=min(int(point.start_time_unix_nano), _MAX_NS),
                    value=value,
                    delta=delta,
                )
            )
