"""A run or shard id given as an integer (even 0) names the same run and shard for
metrics as for spans (issue 41: integer 0 put the metrics in another run and shard)."""

from __future__ import annotations

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

from tests.ingest.span_builders import LLM, normalize_one
from tpmledger.ingest.genai_metrics import token_points

RESOURCES = [
    {"tpmledger.run.id": 0, "tpmledger.shard.id": 0, "service.name": "svc"},
    {"tpmledger.run.id": False, "service.instance.id": 0, "service.name": "svc"},
    {"service.name": "svc", "host.name": "h", "process.pid": 0},
    {"tpmledger.run.id": 7.5, "tpmledger.shard.id": ""},
]


def _any(value: object) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    return AnyValue(string_value=str(value))


def _metric_identity(resource: dict[str, object]) -> tuple[str, str]:
    request = ExportMetricsServiceRequest()
    resource_metrics = request.resource_metrics.add()
    for key, value in resource.items():
        resource_metrics.resource.attributes.append(KeyValue(key=key, value=_any(value)))
    point = metrics_pb2.NumberDataPoint(time_unix_nano=1, as_int=5)
    point.attributes.append(KeyValue(key="gen_ai.token.type", value=_any("input")))
    resource_metrics.scope_metrics.add().metrics.append(
        metrics_pb2.Metric(
            name="gen_ai.client.inference.usage.input_tokens",
            sum=metrics_pb2.Sum(data_points=[point]),
        )
    )
    [stored] = token_points(request).points
    return stored.run_id, stored.shard_id


def test_metrics_and_spans_agree_on_run_and_shard() -> None:
    for resource in RESOURCES:
        columns = normalize_one(LLM, resource=resource)
        assert _metric_identity(resource) == (columns["run_id"], columns["shard_id"]), resource
    assert _metric_identity(RESOURCES[0]) == ("0", "0")
