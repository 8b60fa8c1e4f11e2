"""The simulated server's ``GET /metrics``: vLLM's own names (docs/simulator.md).

See docs/simulator.md#serving-side-metrics.

The same series a vLLM server exposes, labelled ``model_name`` and ``engine``, so tpmledger
scrapes the simulator as it would a real server: ``vllm:num_requests_running`` (requests
in the decode batch), ``vllm:num_requests_waiting`` (waiting for KV-cache room or a batch
slot), ``vllm:kv_cache_usage_perc`` (:class:`simulator.kv_cache.KvCache`),
``vllm:num_preemptions_total`` (0: the simulator waits rather than preempts),
``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``,
``vllm:request_queue_time_seconds`` and ``vllm:time_to_first_token_seconds``.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)


class ServerMetrics:
    """One simulated server's series, in a registry of its own."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(
        self,
        model: str,
        running: Callable[[], float],
        waiting: Callable[[], float],
        kv_cache: Callable[[], float],
    ) -> None:
        self.registry = r = CollectorRegistry()
        labels = ["model_name", "engine"]
        values = (model, "0")
        for name, text, read in (
            ("vllm:num_requests_running", "Requests in the decode batch", running),
            ("vllm:num_requests_waiting", "Requests waiting to be scheduled", waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage (1 = 100 %)", kv_cache),
        ):
            Gauge(name, text, labels, registry=r).labels(*values).set_function(read)
        self.preemptions = Counter(
            "vllm:num_preemptions", "Preemptions", labels, registry=r
        ).labels(*values)
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Prefill tokens processed", labels, registry=r
        ).labels(*values)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Generation tokens processed", labels, registry=r
        ).labels(*values)
        self.queue_time = Histogram(
            "vllm:request_queue_time_seconds", "Time in the waiting queue", labels,
            buckets=_BUCKETS, registry=r,
        ).labels(*values)  # fmt: skip
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "Time to first token", labels,
            buckets=_BUCKETS, registry=r,
        ).labels(*values)  # fmt: skip

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)
