"""tpmledger scrapes vLLM / SGLang Prometheus endpoints itself (docs/metrics.md).

See docs/metrics.md#serving-side-metrics.

For operators without an OpenTelemetry Collector: ``TPMLEDGER_SCRAPE_TARGETS`` (or
``tpmledger up --scrape URL``) names the endpoints, read every
``TPMLEDGER_SCRAPE_INTERVAL_S`` seconds. Each target has its own thread, and every read
has a whole-request deadline (``TPMLEDGER_SCRAPE_TIMEOUT_S``), so a dead or hanging target
delays nothing but its own next scrape — never ingest, never another target. Its state is
on ``/metrics``: ``tpmledger_scrape_up{target}``, the time of its last success, its errors
by stage (``fetch``, ``parse``, ``store``) and the duration of its last scrape.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from tpmledger.ingest.server_exposition import readings_from_exposition
from tpmledger.ingest.server_metrics import ServerReadings
from tpmledger.storage.writers.server_metric_store import add_server_readings

log = logging.getLogger(__name__)

#: The largest exposition read from one target (a vLLM endpoint is a few hundred KiB).
MAX_BODY_BYTES = 16 * 1024 * 1024
_ACCEPT = "text/plain;version=0.0.4;q=1.0, */*;q=0.1"  # what the parser reads
Store = Callable[[str, ServerReadings], object]


def _store(database_url: str, readings: ServerReadings) -> object:
    return add_server_readings(database_url, readings.gauges, readings.counters)


def instance_of(url: str) -> str:
    """A target's instance label, as Prometheus names it: ``host:port`` of its URL."""
    parts = urlsplit(url)
    return parts.netloc or url


class ScrapeFailed(Exception):
    """One scrape failed at ``stage``."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(message)
        self.stage = stage


@dataclass
class TargetState:
    """What ``/metrics`` says about one target."""

    url: str
    up: bool | None = None  # None until its first scrape ended
    last_success_s: float | None = None
    last_duration_s: float | None = None
    readings_total: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    warned: bool = False  # a warning was logged for it while it had never answered


def fetch(url: str, timeout_s: float) -> str:
    """The target's exposition text, read within ``timeout_s`` in all."""
    deadline = time.monotonic() + timeout_s
    request = urllib.request.Request(url, headers={"Accept": _ACCEPT})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = bytearray()
            while chunk := response.read1(65536):
                body += chunk
                if len(body) > MAX_BODY_BYTES:
                    raise ScrapeFailed("fetch", f"body larger than {MAX_BODY_BYTES} bytes")
                if time.monotonic() > deadline:
                    raise ScrapeFailed("fetch", f"no whole answer within {timeout_s:g} s")
            charset = response.headers.get_content_charset() or "utf-8"
    except ScrapeFailed:
        raise
    except Exception as exc:  # refused, reset, timed out, HTTP error: all one stage
        raise ScrapeFailed("fetch", f"{type(exc).__name__}: {exc}") from exc
    return body.decode(charset, errors="replace")


class ServerScraper:
    """Scrapes its targets, each in its own thread, until :meth:`stop`."""

    def __init__(
        self,
        database_url: str,
        targets: Sequence[str],
        *,
        interval_s: float = 15.0,
        timeout_s: float = 10.0,
        store: Store = _store,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.database_url = database_url
        self.interval_s = interval_s
        self.timeout_s = min(timeout_s, interval_s)
        self._store = store
        self._clock = clock  # the readings' time (ns); tests pass their own
        self.states = {url: TargetState(url) for url in dict.fromkeys(targets)}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def scrape_once(self, url: str) -> None:
        """One scrape of ``url``: fetch, parse, store; its state updated either way."""
        state = self.states[url]
        began, now_ns = time.monotonic(), self._clock()
        try:
            text = fetch(url, self.timeout_s)
            try:
                readings = readings_from_exposition(text, instance_of(url), now_ns)
            except Exception as exc:
                raise ScrapeFailed("parse", f"not a Prometheus exposition: {exc}") from exc
            if len(readings):
                try:
                    self._store(self.database_url, readings)
                except Exception as exc:
                    raise ScrapeFailed("store", f"{type(exc).__name__}: {exc}") from exc
        except ScrapeFailed as exc:
            # One line when a target goes down, not one per interval while it stays down. A
            # server that has not answered yet when ingest starts (started beside it, as
            # `up --demo` does) gets one quiet line; a warning when it still does not answer.
            if state.up is None and exc.stage == "fetch":
                report, line = log.info, "no answer yet from %s (%s): %s; retrying"
            elif state.up is False and state.last_success_s is None and not state.warned:
                report, line = log.warning, "still no answer from %s (%s): %s"
            else:
                report = log.debug if state.up is False else log.warning
                line = "scrape of %s failed (%s): %s"
            report(line, url, exc.stage, exc)
            state.warned = state.warned or report == log.warning
            state.up = False
            state.errors[exc.stage] = state.errors.get(exc.stage, 0) + 1
        else:
            if state.up is False:
                log.info("scrape of %s works again", url)
            state.up = True
            state.last_success_s = time.time()
            state.readings_total += len(readings)
        finally:
            state.last_duration_s = time.monotonic() - began

    def _loop(self, url: str) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            self.scrape_once(url)
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - began)))

    def start(self) -> None:
        """Start one daemon thread per target."""
        for url in self.states:
            thread = threading.Thread(target=self._loop, args=(url,), name="scrape", daemon=True)
            thread.start()
            self._threads.append(thread)
        if self.states:
            log.info("scraping %d server endpoint(s) every %g s", len(self.states), self.interval_s)

    def stop(self, wait_s: float = 1.0) -> None:
        """Stop scraping; a thread still inside a slow read is left to its deadline."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=wait_s)

    def collector(self) -> Collector:
        """The ``tpmledger_scrape_*`` series of every target, read at scrape time."""
        return _ScrapeCollector(self)


class _ScrapeCollector(Collector):
    def __init__(self, scraper: ServerScraper) -> None:
        self._scraper = scraper

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        states = list(self._scraper.states.values())
        up = GaugeMetricFamily(
            "tpmledger_scrape_up",
            "1 when the last scrape of the server endpoint succeeded, 0 when it failed",
            labels=["target"],
        )
        success = GaugeMetricFamily(
            "tpmledger_scrape_last_success_timestamp_seconds",
            "When the server endpoint was last scraped successfully (Unix time)",
            labels=["target"],
        )
        duration = GaugeMetricFamily(
            "tpmledger_scrape_duration_seconds",
            "Wall time of the endpoint's last scrape",
            labels=["target"],
        )
        errors = CounterMetricFamily(
            "tpmledger_scrape_errors",
            "Failed scrapes of the server endpoint by stage (fetch, parse, store)",
            labels=["target", "stage"],
        )
        readings = CounterMetricFamily(
            "tpmledger_scrape_readings",
            "Gauge and counter readings of vLLM / SGLang series stored from the endpoint",
            labels=["target"],
        )
        for s in states:
            if s.up is not None:
                up.add_metric([s.url], 1.0 if s.up else 0.0)
            if s.last_success_s is not None:
                success.add_metric([s.url], s.last_success_s)
            if s.last_duration_s is not None:
                duration.add_metric([s.url], s.last_duration_s)
            for stage in ("fetch", "parse", "store"):
                errors.add_metric([s.url, stage], s.errors.get(stage, 0))
            readings.add_metric([s.url], s.readings_total)
        yield from (up, success, duration, errors, readings)
