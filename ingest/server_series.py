"""The servers' newest closed minute on ``/metrics`` (docs/operations.md#serving-side-series).

A prometheus_client collector: at each scrape it reads, in one snapshot, each vLLM / SGLang
server's newest closed minute of the last five (:mod:`storage.readers.server_minutes_read`) — one
series per server (label ``server``: its instance; ``instance`` is Prometheus' own label),
engine and model — and whether it was *saturated* by the rule the bottleneck verdict uses
(:func:`analytics.verdicts.server_evidence.is_saturated`, imported on the first scrape so
ingest starts without analytics): requests waiting while the KV cache is ≥ 90 % full or
requests are preempted. The ``TpmledgerServingSaturated`` alert reads it. A figure the
server did not report is left out, never written as 0.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from tpmledger.storage.readers.server_minutes_read import ServerMinute, newest_server_minutes
from tpmledger.storage.server.database import in_one_snapshot

log = logging.getLogger(__name__)

_LABELS = ["server", "engine", "model"]
LOOKBACK_S = 300  # a server silent for longer drops out of /metrics
_FIGURES = (
    ("running_mean", "tpmledger_server_requests_running", "Mean requests running"),
    ("waiting_mean", "tpmledger_server_requests_waiting", "Mean requests waiting in the queue"),
    ("kv_cache_mean", "tpmledger_server_kv_cache_usage_ratio", "Mean KV-cache use (1 = full)"),
    ("preemptions", "tpmledger_server_preemptions", "Requests preempted (SGLang: retracted)"),
)


class ServerSeriesCollector(Collector):
    """Yields the ``tpmledger_server_*`` families of one scrape."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url

    def describe(self) -> Iterable[Metric]:
        return []  # read at scrape time only

    def collect(self) -> Iterator[Metric]:
        # The verdict's own rule; this module of analytics imports only storage.
        from tpmledger.analytics.verdicts.server_evidence import DefaultThresholds, is_saturated

        before_s = int(time.time()) // 60 * 60  # the current minute is still open
        try:
            servers = in_one_snapshot(
                self.database_url, newest_server_minutes, before_s, LOOKBACK_S
            )
        except Exception as exc:  # the database is down: the other series still answer
            log.warning("server series not read: %s", exc)
            return
        params = DefaultThresholds()
        for field, name, text in _FIGURES:
            family = GaugeMetricFamily(name, f"{text}, in the server's newest closed minute",
                                       labels=_LABELS)  # fmt: skip
            for s in servers:
                value = getattr(s, field)
                if value is not None:
                    family.add_metric(_values(s), value)
            yield family
        saturated = GaugeMetricFamily(
            "tpmledger_server_saturated",
            "1 when the server's newest closed minute had requests waiting with its KV cache "
            "≥ 90 % full or preemptions (the bottleneck verdict's serving rule), else 0",
            labels=_LABELS,
        )
        stamp = GaugeMetricFamily(
            "tpmledger_server_minute_timestamp_seconds",
            "Which minute the tpmledger_server_* series describe (its start, Unix time)",
            labels=_LABELS,
        )
        for s in servers:
            saturated.add_metric(_values(s), 1.0 if is_saturated(s, params) else 0.0)
            stamp.add_metric(_values(s), s.minute_ns / 1e9)
        yield saturated
        yield stamp


def _values(s: ServerMinute) -> list[str]:
    return [s.instance, s.engine, s.model]
