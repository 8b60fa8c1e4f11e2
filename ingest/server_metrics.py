"""The serving side's own metrics: vLLM and SGLang names (docs/metrics.md#serving-side-metrics).

A self-hosted server that is the limit rarely fails: requests wait in its queue, its KV
cache fills, it preempts. It says so on its Prometheus endpoint, under stable names; this
module turns those series into readings per server *key* — instance, engine (``vllm`` /
``sglang``), model (the ``model_name`` label) and, when the series carries one, the run
(label ``tpmledger_run_id`` or attribute ``tpmledger.run.id``) — whichever way they came
in: a scrape (:mod:`ingest.server_scraper`) or an OTLP metrics export
(:mod:`ingest.server_metrics_otlp`).

Gauges of one reading are combined across the series of one key (vLLM labels each engine
of a data-parallel server apart): running, waiting and throughput add up, KV-cache use is
their mean. Counters stay one stream per series; storage turns their values into
increases (``storage.writers.server_metric_store``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from tpmledger.durations import MINUTE_NS

_MAX_ID_CHARS: Final = 512  # as for spans (ingest/span_validation.py)

#: Gauge name → (engine, field). ``kv_cache`` is a fraction of the KV-cache pool (1 = full).
GAUGES: Final[Mapping[str, tuple[str, str]]] = {
    "vllm:num_requests_running": ("vllm", "running"),
    "vllm:num_requests_waiting": ("vllm", "waiting"),
    "vllm:kv_cache_usage_perc": ("vllm", "kv_cache"),
    "vllm:gpu_cache_usage_perc": ("vllm", "kv_cache"),  # before vLLM 0.10
    "sglang:num_running_reqs": ("sglang", "running"),
    "sglang:num_queue_reqs": ("sglang", "waiting"),
    "sglang:token_usage": ("sglang", "kv_cache"),
    "sglang:gen_throughput": ("sglang", "gen_throughput"),
}
#: Counter name (without ``_total``) → (engine, field). SGLang retracts where vLLM preempts.
COUNTERS: Final[Mapping[str, tuple[str, str]]] = {
    "vllm:num_preemptions": ("vllm", "preemptions"),
    "vllm:prompt_tokens": ("vllm", "prompt_tokens"),
    "vllm:generation_tokens": ("vllm", "generation_tokens"),
    "sglang:num_retracted_requests": ("sglang", "preemptions"),
    "sglang:prompt_tokens": ("sglang", "prompt_tokens"),
    "sglang:generation_tokens": ("sglang", "generation_tokens"),
}
#: Histogram name → (engine, field of its sum, field of its count).
HISTOGRAMS: Final[Mapping[str, tuple[str, str, str]]] = {
    "vllm:request_queue_time_seconds": ("vllm", "queue_time_s", "queue_count"),
    "vllm:time_to_first_token_seconds": ("vllm", "ttft_s", "ttft_count"),
    "sglang:queue_time_seconds": ("sglang", "queue_time_s", "queue_count"),
    "sglang:time_to_first_token_seconds": ("sglang", "ttft_s", "ttft_count"),
}
_SUMMED: Final = frozenset({"running", "waiting", "gen_throughput"})  # else: the mean
MODEL_LABELS: Final = ("model_name", "model")
RUN_LABELS: Final = ("tpmledger_run_id", "tpmledger.run.id")


def is_server_metric(name: str) -> bool:
    """Whether ``name`` (a metric or sample name) is one tpmledger reads from servers."""
    return name.startswith(("vllm:", "sglang:"))


def counter_field(name: str) -> tuple[str, str] | None:
    """(engine, field) of a counter named with or without its ``_total`` suffix."""
    return COUNTERS.get(name.removesuffix("_total"))


@dataclass(frozen=True)
class ServerKey:
    """Which server minute row a reading belongs to."""

    instance: str
    engine: str
    model: str
    run_id: str  # '' when the series does not name its run


@dataclass(frozen=True)
class GaugeReading:
    """One gauge's value at one time, combined over the key's series."""

    key: ServerKey
    minute_ns: int
    field: str
    value: float


@dataclass(frozen=True)
class CounterReading:
    """One counter series' value at one time; ``start_ns`` 0 when unknown."""

    key: ServerKey
    minute_ns: int
    field: str
    stream: str  # SHA-256 of the series' identity
    start_ns: int
    value: float
    delta: bool = False  # an OTLP delta point: its value is the increase


@dataclass
class ServerReadings:
    """What one scrape or export holds for tpmledger's server minutes."""

    gauges: list[GaugeReading] = field(default_factory=list)
    counters: list[CounterReading] = field(default_factory=list)
    rejected: int = 0  # values that are not finite non-negative numbers, or bad ids
    points: int = 0  # OTLP data points of server metrics read (stored or rejected)

    def __len__(self) -> int:
        return len(self.gauges) + len(self.counters)


def key_of(instance: str, engine: str, labels: Mapping[str, object]) -> ServerKey | None:
    """The key of a series with ``labels``; None if an id is too long or holds a NUL."""
    model = next((str(labels[k]) for k in MODEL_LABELS if labels.get(k)), "")
    run = next((str(labels[k]) for k in RUN_LABELS if labels.get(k)), "")
    if any(len(v) > _MAX_ID_CHARS or "\x00" in v for v in (instance, model, run)):
        return None
    return ServerKey(instance, engine, model, run)


def stream_id(instance: str, name: str, labels: Mapping[str, object]) -> str:
    """The identity of one counter series: instance, name and every label."""
    parts = [instance, name, *sorted(f"{k}={v}" for k, v in labels.items())]
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()


def usable(value: float) -> bool:
    """A reading tpmledger keeps: a finite, non-negative number."""
    return math.isfinite(value) and value >= 0


class GaugeCombiner:
    """Gauge values of one reading time, combined per key and field (sum or mean)."""

    def __init__(self) -> None:
        self._values: dict[tuple[ServerKey, int, str], list[float]] = {}

    def add(self, key: ServerKey, time_ns: int, name: str, value: float) -> None:
        self._values.setdefault((key, time_ns, name), []).append(value)

    def readings(self) -> Iterable[GaugeReading]:
        for (key, time_ns, name), values in self._values.items():
            total = math.fsum(values)
            value = total if name in _SUMMED else total / len(values)
            yield GaugeReading(key, time_ns // MINUTE_NS * MINUTE_NS, name, value)
