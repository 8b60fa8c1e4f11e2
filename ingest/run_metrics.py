"""Per-run series on ``/metrics`` (docs/operations.md#per-run-series).

A prometheus_client collector: at each scrape it reads, in one database snapshot, the
figures of every live run and every run whose last event is inside
``TPMLEDGER_METRICS_RUN_WINDOW_S`` (:mod:`analytics.views.run_series`, imported on the
first scrape so the ingest process starts without analytics). Labels are the run id and a
few fixed words: no per-call label, so the series count grows with runs only. A figure
that is not measured is left out, never written as 0.

If the database cannot be read, the scrape still answers with ingest's own series and
``tpmledger_run_series_up 0``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from tpmledger.error_classes import error_class
from tpmledger.storage.server.database import in_one_snapshot

if TYPE_CHECKING:
    from tpmledger.analytics.views.run_series import RunSeries, SealedCache

log = logging.getLogger(__name__)

_RUN = ["run_id"]


class RunSeriesCollector(Collector):
    """Yields the ``tpmledger_run_*`` families of one scrape."""

    def __init__(self, database_url: str, *, window_s: float, close_after_s: float) -> None:
        self.database_url = database_url
        self.window_s = window_s
        self.close_after_s = close_after_s
        self.cache: SealedCache | None = None  # created on the first scrape (lazy import)

    def describe(self) -> Iterable[Metric]:
        return []  # read at scrape time only: registering must not touch the database

    def collect(self) -> Iterator[Metric]:
        from tpmledger.analytics.views.run_series import SealedCache, run_series

        if self.cache is None:
            self.cache = SealedCache()

        up = GaugeMetricFamily(
            "tpmledger_run_series_up",
            "1 when the per-run series of this scrape were read, 0 when the database failed",
        )
        try:
            runs = in_one_snapshot(
                self.database_url,
                run_series,
                window_s=self.window_s,
                close_after_s=self.close_after_s,
                cache=self.cache,
            )
        except Exception as exc:  # the database is down: ingest's own series still answer
            log.warning("per-run series not read: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        yield from _families(runs)


def _families(runs: list[RunSeries]) -> Iterator[Metric]:
    tokens = CounterMetricFamily(
        "tpmledger_run_tokens",
        "Tokens of the run's attempts by OTel GenAI token type (input = prompt, output = "
        "completion)",
        labels=["run_id", "token_type"],
    )
    attempts = CounterMetricFamily(
        "tpmledger_run_attempts", "Attempts of the run by outcome", labels=["run_id", "outcome"]
    )
    errors = CounterMetricFamily(
        "tpmledger_run_errors",
        "Failed attempts of the run by error type (error.type, else http_<status>) and its "
        "class: rate_limited, serving, client or other (docs/metrics.md#error-classes)",
        labels=["run_id", "error_type", "error_class"],
    )
    retries = CounterMetricFamily(
        "tpmledger_run_retries", "Attempts that were retries (resend count > 0)", labels=_RUN
    )
    minute_tpm = GaugeMetricFamily(
        "tpmledger_run_minute_tpm",
        "Tokens per minute of the newest closed minute (total / prompt / completion)",
        labels=["run_id", "token_type"],
    )
    retry_rate = GaugeMetricFamily(
        "tpmledger_run_minute_retry_rate",
        "Retries / attempts of the newest closed minute",
        labels=_RUN,
    )
    ttft = GaugeMetricFamily(
        "tpmledger_run_minute_ttft_p95_seconds",
        "95th percentile time to first token of the newest closed minute",
        labels=_RUN,
    )
    in_flight = GaugeMetricFamily(
        "tpmledger_run_minute_in_flight_mean",
        "Mean attempts in flight over the seconds of the newest closed minute (whole run)",
        labels=_RUN,
    )
    minute_ts = GaugeMetricFamily(
        "tpmledger_run_minute_timestamp_seconds",
        "Start of the newest closed minute (Unix seconds): the minute the minute gauges show",
        labels=_RUN,
    )
    cap = GaugeMetricFamily(
        "tpmledger_run_concurrency_cap",
        "Declared concurrency cap of the whole run (sum of each shard's largest)",
        labels=_RUN,
    )
    storm = GaugeMetricFamily(
        "tpmledger_run_retry_storm",
        "1 while the newest closed minute is a retry-storm minute (retries / first attempts "
        "above the retry budget 0.2)",
        labels=_RUN,
    )
    silent = GaugeMetricFamily(
        "tpmledger_run_shards_silent",
        "Shards that reported in the run's last 10 closed minutes but not in the newest 2 "
        "while others did",
        labels=_RUN,
    )
    headroom = GaugeMetricFamily(
        "tpmledger_run_quota_headroom_ratio",
        "Headroom before the provider's quota in the newest closed minute, per target: "
        "1 - used / quota (the lower of tokens and requests); absent without a quota",
        labels=["run_id", "provider", "model"],
    )
    live = GaugeMetricFamily(
        "tpmledger_run_live", "1 while the run is receiving data, 0 once sealed", labels=_RUN
    )
    age = GaugeMetricFamily(
        "tpmledger_run_data_age_seconds",
        "Seconds since the run's newest stored attempt ended",
        labels=_RUN,
    )
    for run in runs:
        rid = [run.run_id]
        live.add_metric(rid, 1 if run.live else 0)
        age.add_metric(rid, run.data_age_s)
        if run.concurrency_cap is not None:
            cap.add_metric(rid, run.concurrency_cap)
        if run.input_tokens is not None:
            tokens.add_metric([run.run_id, "input"], run.input_tokens)
        if run.output_tokens is not None:
            tokens.add_metric([run.run_id, "output"], run.output_tokens)
        for token_type, value in sorted(run.other_tokens.items()):
            tokens.add_metric([run.run_id, token_type], value)
        for error_type, count in sorted(run.errors.items()):
            errors.add_metric([run.run_id, error_type, error_class(error_type)], count)
        if run.successes is not None:
            attempts.add_metric([run.run_id, "success"], run.successes)
        if run.failures is not None:
            attempts.add_metric([run.run_id, "error"], run.failures)
        if run.retries is not None:
            retries.add_metric(rid, run.retries)
        if run.minute_utc is not None:
            minute_ts.add_metric(rid, run.minute_utc.timestamp())
            for token_type, value in run.minute_tpm.items():
                minute_tpm.add_metric([run.run_id, token_type], value)
        if run.minute_retry_rate is not None:
            retry_rate.add_metric(rid, run.minute_retry_rate)
        if run.minute_ttft_p95_s is not None:
            ttft.add_metric(rid, run.minute_ttft_p95_s)
        if run.minute_in_flight_mean is not None:
            in_flight.add_metric(rid, run.minute_in_flight_mean)
        if run.retry_storm is not None:
            storm.add_metric(rid, 1 if run.retry_storm else 0)
        if run.shards_silent is not None:
            silent.add_metric(rid, run.shards_silent)
        for (provider, model), ratio in sorted(run.headroom.items()):
            headroom.add_metric([run.run_id, provider, model], ratio)
    yield from (
        tokens,
        attempts,
        retries,
        errors,
        minute_tpm,
        retry_rate,
        ttft,
        in_flight,
        minute_ts,
    )
    yield from (cap, headroom, storm, silent, live, age)
